package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/setnxlock/setnxlock"
)

// inspectTimeout bounds status's and release's round trips.
const inspectTimeout = 10 * time.Second

// formatNames are the names status prints, run's --format names.
var formatNames = map[setnxlock.Format]string{
	setnxlock.TokenFormat:  "token",
	setnxlock.UnixMillis:   "millis",
	setnxlock.UnixSeconds:  "seconds",
	setnxlock.FloatSeconds: "float",
}

// statusJSON is status --json's one object; the first five fields are the
// contract of issue 14.
type statusJSON struct {
	Key       string  `json:"key"`
	Held      bool    `json:"held"`
	ExpiresAt *string `json:"expires_at"` // RFC 3339; null when free or foreign
	Format    *string `json:"format"`     // a --format name, "foreign", or null when missing
	Waiters   int64   `json:"waiters"`
	Value     *string `json:"value"`    // the stored string; null when missing or not a string
	Identity  *string `json:"identity"` // who holds it (WithIdentity); null when the value says not
}

// statusCommand is setnxlock status: what a key holds, writing nothing.
func statusCommand(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlagSet("status")
	url := urlFlag(fs)
	asJSON := fs.Bool("json", false, "print one JSON object (with --match, an array of them)")
	match := fs.String("match", "", "list the lock keys that match this SCAN pattern instead of one KEY")
	rw := fs.Bool("rw", false, "read the read/write lock NAME (its writer and live readers) instead of one KEY")
	help := fs.BoolP("help", "h", false, "this help")
	var key string
	var err error
	if key, err = parseStatusArgs(fs, args); err != nil || *help {
		if *help {
			fmt.Fprintf(stdout, statusHelp, fs.FlagUsages())
		}
		return exitOK, err
	}
	locker, done, err := inspector(*url, "status")
	if err != nil {
		return exitOK, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	switch {
	case *match != "":
		return scanCommand(ctx, locker, *match, *asJSON, *url, stdout, stderr)
	case *rw:
		return rwStatusCommand(ctx, locker, key, *asJSON, *url, stdout, stderr)
	case fs.NArg() > 1:
		return groupStatusCommand(ctx, locker, fs.Args(), *asJSON, *url, stdout, stderr)
	}
	status, err := locker.Status(ctx, key)
	if err != nil {
		fmt.Fprintf(stderr, "setnxlock: %s: cannot read the key at %s: %v\n", key, redactURL(*url), err)
		return exitUnavailable, nil
	}
	if *asJSON {
		data, _ := json.Marshal(toJSON(status)) // plain strings, bools and numbers always encode
		fmt.Fprintln(stdout, string(data))
	} else {
		fmt.Fprintln(stdout, describe(status))
	}
	return statusCode(status), nil
}

// parseStatusArgs parses status's flags and its one KEY (the first of
// several keys of a group, or with --rw the read/write lock's NAME), or
// none with --match.
func parseStatusArgs(fs *pflag.FlagSet, args []string) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", usageIn("status", err)
	}
	if rw, _ := fs.GetBool("rw"); rw && fs.Changed("match") {
		return "", usageIn("status", errors.New("--rw and --match exclude each other"))
	}
	if rw, _ := fs.GetBool("rw"); !rw && !fs.Changed("match") && fs.NArg() > 1 {
		return groupKeys(fs)
	}
	if !fs.Changed("match") {
		return oneKey(fs, "status")
	}
	switch match, _ := fs.GetString("match"); {
	case match == "":
		return "", usageIn("status", errors.New("--match PATTERN is empty"))
	case fs.NArg() != 0:
		return "", usageIn("status", fmt.Errorf("status --match takes no KEY, got %d arguments", fs.NArg()))
	}
	return "", nil
}

// scanCommand is status --match: the status of every lock key that
// matches pattern, found with SCAN (Locker.ScanStatus).
func scanCommand(ctx context.Context, locker *setnxlock.Locker, pattern string, asJSON bool, url string, stdout, stderr io.Writer) (int, error) {
	statuses, err := locker.ScanStatus(ctx, pattern)
	if err != nil {
		fmt.Fprintf(stderr, "setnxlock: %s: cannot list the keys at %s: %v\n", pattern, redactURL(url), err)
		return exitUnavailable, nil
	}
	code := exitFree
	objects := make([]statusJSON, 0, len(statuses))
	for _, s := range statuses {
		if s.Held {
			code = exitOK
		}
		objects = append(objects, toJSON(s))
	}
	switch {
	case asJSON:
		data, _ := json.Marshal(objects) // plain strings, bools and numbers always encode
		fmt.Fprintln(stdout, string(data))
	case len(statuses) == 0:
		fmt.Fprintf(stdout, "no key matches %q\n", pattern)
	default:
		for _, s := range statuses {
			fmt.Fprintln(stdout, describe(s))
		}
	}
	return code, nil
}

// statusCode is status's exit status: 0 held, 3 free, 4 foreign.
func statusCode(s setnxlock.KeyStatus) int {
	switch {
	case s.Foreign:
		return exitForeign
	case s.Held:
		return exitOK
	}
	return exitFree
}

func toJSON(s setnxlock.KeyStatus) statusJSON {
	j := statusJSON{Key: s.Key, Held: s.Held, Waiters: s.Waiters}
	switch {
	case s.Foreign:
		j.Format = ptr("foreign")
	case s.Exists:
		j.Format = ptr(formatNames[s.Format])
		j.ExpiresAt = ptr(stamp(s.ExpiresAt))
	}
	if s.Exists && (s.Value != "" || !s.Foreign) {
		j.Value = ptr(s.Value)
	}
	if s.Identity != "" {
		j.Identity = ptr(s.Identity)
	}
	return j
}

func ptr[T any](v T) *T { return &v }

// describe is status's line for people.
func describe(s setnxlock.KeyStatus) string {
	line := s.Key + ": "
	switch {
	case s.Foreign && s.Value != "":
		line += fmt.Sprintf("holds %q, which is not a lock value", s.Value)
	case s.Foreign:
		line += "holds a key of another type, not a lock value"
	case !s.Exists:
		line += "free"
	case s.Held:
		line += fmt.Sprintf("held until %s (%s)", stamp(s.ExpiresAt), formatNames[s.Format])
	default:
		line += fmt.Sprintf("free: its lease ended at %s (%s)", stamp(s.ExpiresAt), formatNames[s.Format])
	}
	switch {
	case s.Identity == "" || s.Foreign:
	case s.Held:
		line += fmt.Sprintf(" by %q", s.Identity)
	default:
		line += fmt.Sprintf(", last held by %q", s.Identity)
	}
	if s.Waiters > 0 {
		line += fmt.Sprintf(", %d waiting", s.Waiters)
	}
	return line
}

// parseKeyCommand parses the flags of status and release and their one KEY.
func parseKeyCommand(fs *pflag.FlagSet, topic string, args []string) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", usageIn(topic, err)
	}
	return oneKey(fs, topic)
}

// oneKey is the one KEY of a parsed command line, or "" with --help.
func oneKey(fs *pflag.FlagSet, topic string) (string, error) {
	if help, _ := fs.GetBool("help"); help {
		return "", nil
	}
	switch {
	case fs.NArg() != 1:
		return "", usageIn(topic, fmt.Errorf("%s takes one KEY, got %d arguments", topic, fs.NArg()))
	case fs.Arg(0) == "":
		return "", usageIn(topic, errors.New("KEY is empty"))
	}
	return fs.Arg(0), nil
}

// inspector is a Locker for status and release, which only read and
// delete: it never acquires.
func inspector(rawURL, topic string) (*setnxlock.Locker, func(), error) {
	client, err := newClient(rawURL)
	if err != nil {
		return nil, nil, usageIn(topic, err)
	}
	locker, err := setnxlock.New(client)
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return locker, func() { _ = locker.Close(); _ = client.Close() }, nil
}
