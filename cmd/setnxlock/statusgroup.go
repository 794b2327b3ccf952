package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/pflag"

	"github.com/setnxlock/setnxlock"
)

// status of several keys: a group lock (Locker.AcquireMany) holds one
// value at every key of the group, each an ordinary lock value, so each
// key reads as status reads one; the group shows as the keys sharing that
// value.

// groupJSON is status --json KEY KEY...'s one object.
type groupJSON struct {
	Keys []statusJSON `json:"keys"` // status --json's object for each key, in the order given
	// OneHolder is true when every key holds one live lease with the same
	// value: one group lock holds them all.
	OneHolder bool `json:"one_holder"`
}

// groupKeys checks the KEYs of status KEY KEY...: none empty, none twice.
func groupKeys(fs *pflag.FlagSet) (string, error) {
	if help, _ := fs.GetBool("help"); help {
		return "", nil
	}
	for i, key := range fs.Args() {
		switch {
		case key == "":
			return "", usageIn("status", errors.New("KEY is empty"))
		case slices.Contains(fs.Args()[:i], key):
			return "", usageIn("status", fmt.Errorf("%q is given twice", key))
		}
	}
	return fs.Arg(0), nil
}

// groupStatusCommand is status KEY KEY...: each key's status, and whether
// one lease (a group's) holds them all. Its exit status is 0 when every
// key is held, else 4 when one holds something that is not a lock value,
// else 3.
func groupStatusCommand(ctx context.Context, locker *setnxlock.Locker, keys []string, asJSON bool, url string, stdout, stderr io.Writer) (int, error) {
	statuses := make([]setnxlock.KeyStatus, 0, len(keys))
	for _, key := range keys {
		status, err := locker.Status(ctx, key)
		if err != nil {
			fmt.Fprintf(stderr, "setnxlock: %s: cannot read the key at %s: %v\n", key, redactURL(url), err)
			return exitUnavailable, nil
		}
		statuses = append(statuses, status)
	}
	one := oneHolder(statuses)
	if asJSON {
		object := groupJSON{Keys: make([]statusJSON, 0, len(statuses)), OneHolder: one}
		for _, s := range statuses {
			object.Keys = append(object.Keys, toJSON(s))
		}
		data, _ := json.Marshal(object) // plain strings, bools and numbers always encode
		fmt.Fprintln(stdout, string(data))
	} else {
		for _, s := range statuses {
			fmt.Fprintln(stdout, describe(s))
		}
		if one {
			fmt.Fprintf(stdout, "all %d keys hold one lease: one group's lock\n", len(statuses))
		}
	}
	return groupStatusCode(statuses), nil
}

// oneHolder reports whether every key holds a live lease with one value.
func oneHolder(statuses []setnxlock.KeyStatus) bool {
	for _, s := range statuses {
		if !s.Held || s.Foreign || s.Value != statuses[0].Value {
			return false
		}
	}
	return len(statuses) > 0
}

// groupStatusCode is status KEY KEY...'s exit status.
func groupStatusCode(statuses []setnxlock.KeyStatus) int {
	code := exitOK
	for _, s := range statuses {
		switch {
		case s.Foreign:
			return exitForeign
		case !s.Held:
			code = exitFree
		}
	}
	return code
}
