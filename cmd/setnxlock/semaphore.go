package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/setnxlock/setnxlock"
)

// semaphoreCommand is setnxlock semaphore: status and resize of a
// semaphore whose permits run --permits takes.
func semaphoreCommand(args []string, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 {
		return exitOK, usageIn("semaphore", errors.New("semaphore needs a subcommand: status or resize"))
	}
	switch args[0] {
	case "status":
		return semaphoreStatusCommand(args[1:], stdout, stderr)
	case "resize":
		return semaphoreResizeCommand(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, semaphoreHelp)
		return exitOK, nil
	}
	return exitOK, usageIn("semaphore", fmt.Errorf("unknown semaphore subcommand %q (status or resize)", args[0]))
}

// semaphoreJSON is semaphore status --json's one object.
type semaphoreJSON struct {
	Name string `json:"name"`
	// Permits is the count recorded in Redis; null when none is (no
	// acquisition has run yet).
	Permits *int         `json:"permits"`
	Held    int          `json:"held"`    // len(holders)
	Holders []statusJSON `json:"holders"` // status --json's objects, one per live permit
	Foreign []string     `json:"foreign"` // permit keys that hold something that is not a lock value
	Waiters int64        `json:"waiters"`
}

// semaphoreStatusCommand is setnxlock semaphore status: the recorded
// count, the live permits and the waiters, writing nothing.
func semaphoreStatusCommand(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlagSet("semaphore status")
	url := urlFlag(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	help := fs.BoolP("help", "h", false, "this help")
	name, err := parseSemaphoreName(fs, "semaphore status", args, 1)
	if err != nil || *help {
		if *help {
			fmt.Fprintf(stdout, semaphoreStatusHelp, fs.FlagUsages())
		}
		return exitOK, err
	}
	sem, done, err := semaphoreInspector(*url, name, "semaphore status")
	if err != nil {
		return exitOK, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	status, err := sem.Status(ctx)
	switch {
	case errors.Is(err, setnxlock.ErrNotLockValue):
		fmt.Fprintf(stderr, "setnxlock: %s: %v\n", name, err)
		return exitForeign, nil
	case err != nil:
		fmt.Fprintf(stderr, "setnxlock: %s: cannot read the semaphore at %s: %v\n", name, redactURL(*url), err)
		return exitUnavailable, nil
	}
	if *asJSON {
		data, _ := json.Marshal(semaphoreToJSON(status)) // plain strings, bools and numbers always encode
		fmt.Fprintln(stdout, string(data))
	} else {
		fmt.Fprint(stdout, describeSemaphore(status))
	}
	return semaphoreStatusCode(status), nil
}

// semaphoreStatusCode is semaphore status's exit status: 0 when a permit
// is held, else 4 when a permit key holds something that is not a lock
// value, else 3.
func semaphoreStatusCode(s setnxlock.SemaphoreStatus) int {
	switch {
	case len(s.Holders) > 0:
		return exitOK
	case len(s.Foreign) > 0:
		return exitForeign
	}
	return exitFree
}

func semaphoreToJSON(s setnxlock.SemaphoreStatus) semaphoreJSON {
	j := semaphoreJSON{Name: s.Name, Held: len(s.Holders), Holders: []statusJSON{}, Foreign: []string{}, Waiters: s.Waiters}
	if s.Permits > 0 {
		j.Permits = ptr(s.Permits)
	}
	for _, h := range s.Holders {
		j.Holders = append(j.Holders, toJSON(h))
	}
	j.Foreign = append(j.Foreign, s.Foreign...)
	return j
}

// describeSemaphore is semaphore status's lines for people: a summary,
// then one line per live or foreign permit, as status describes a key.
func describeSemaphore(s setnxlock.SemaphoreStatus) string {
	var b strings.Builder
	count := "no count recorded (never acquired)"
	if s.Permits > 0 {
		count = fmt.Sprintf("%d permits", s.Permits)
	}
	fmt.Fprintf(&b, "%s: %s, %d held, %d waiting\n", s.Name, count, len(s.Holders), s.Waiters)
	for _, h := range s.Holders {
		h.Waiters = 0 // the semaphore's waiters are counted above, once
		fmt.Fprintf(&b, "  %s\n", describe(h))
	}
	for _, key := range s.Foreign {
		fmt.Fprintf(&b, "  %s: holds something that is not a lock value (skipped)\n", key)
	}
	return b.String()
}

// semaphoreResizeCommand is setnxlock semaphore resize: record a new
// count, the operator's act that Semaphore.Resize is, and say the old and
// the new one.
func semaphoreResizeCommand(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlagSet("semaphore resize")
	url := urlFlag(fs)
	help := fs.BoolP("help", "h", false, "this help")
	name, err := parseSemaphoreName(fs, "semaphore resize", args, 2)
	if err != nil || *help {
		if *help {
			fmt.Fprintf(stdout, semaphoreResizeHelp, fs.FlagUsages())
		}
		return exitOK, err
	}
	permits, err := strconv.Atoi(fs.Arg(1))
	if err != nil || permits < 1 {
		return exitOK, usageIn("semaphore resize", fmt.Errorf("permits %q: want a whole number, at least 1", fs.Arg(1)))
	}
	sem, done, err := semaphoreInspector(*url, name, "semaphore resize")
	if err != nil {
		return exitOK, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	// The old count is read just before the new one is written, not in
	// the same round trip: what is printed as the old count is what was
	// recorded at that read.
	before, err := sem.Status(ctx)
	switch {
	case errors.Is(err, setnxlock.ErrNotLockValue):
		fmt.Fprintf(stderr, "setnxlock: %s: %v; left alone\n", name, err)
		return exitForeign, nil
	case err != nil:
		fmt.Fprintf(stderr, "setnxlock: %s: cannot read the semaphore at %s: %v\n", name, redactURL(*url), err)
		return exitUnavailable, nil
	}
	if err := sem.Resize(ctx, permits); err != nil {
		fmt.Fprintf(stderr, "setnxlock: %s: cannot resize at %s: %v\n", name, redactURL(*url), err)
		return exitUnavailable, nil
	}
	old := "none recorded"
	if before.Permits > 0 {
		old = strconv.Itoa(before.Permits)
	}
	fmt.Fprintf(stdout, "%s: permits %s -> %d\n", name, old, permits)
	if past := heldPast(before, permits); past > 0 {
		fmt.Fprintf(stdout, "%s: %d live permits past the new count keep them until they are released or their leases end\n", name, past)
	}
	return exitOK, nil
}

// heldPast counts the holders of permits numbered permits or more, which
// a shrink to permits leaves live (it never revokes a permit).
func heldPast(s setnxlock.SemaphoreStatus, permits int) int {
	within := make(map[string]bool, permits)
	for i := range permits {
		within[setnxlock.PermitKey(s.Name, i)] = true
	}
	past := 0
	for _, h := range s.Holders {
		if !within[h.Key] {
			past++
		}
	}
	return past
}

// parseSemaphoreName parses a semaphore subcommand's flags and its n
// arguments, the first the semaphore's NAME, and returns NAME ("" with
// --help).
func parseSemaphoreName(fs *pflag.FlagSet, topic string, args []string, n int) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", usageIn(topic, err)
	}
	if help, _ := fs.GetBool("help"); help {
		return "", nil
	}
	switch {
	case fs.NArg() != n && n == 1:
		return "", usageIn(topic, fmt.Errorf("%s takes one NAME, got %d arguments", topic, fs.NArg()))
	case fs.NArg() != n:
		return "", usageIn(topic, fmt.Errorf("%s takes NAME and PERMITS, got %d arguments", topic, fs.NArg()))
	case fs.Arg(0) == "":
		return "", usageIn(topic, errors.New("NAME is empty"))
	}
	return fs.Arg(0), nil
}

// semaphoreInspector is the semaphore name for status and resize. Its
// own count (1) is never used to acquire: Status reads the recorded
// count's permits, and Resize replaces the count.
func semaphoreInspector(rawURL, name, topic string) (*setnxlock.Semaphore, func(), error) {
	locker, done, err := inspector(rawURL, topic)
	if err != nil {
		return nil, nil, err
	}
	sem, err := locker.Semaphore(name, 1)
	if err != nil {
		done()
		return nil, nil, usageIn(topic, err)
	}
	return sem, done, nil
}
