package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/setnxlock/setnxlock"
)

// releaseCommand is setnxlock release --force: delete a lock key whoever
// holds it, and say what was deleted.
func releaseCommand(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlagSet("release")
	url := urlFlag(fs)
	force := fs.Bool("force", false, "required: delete the lock whoever holds it")
	help := fs.BoolP("help", "h", false, "this help")
	key, err := parseKeyCommand(fs, "release", args)
	if err != nil || *help {
		if *help {
			fmt.Fprintf(stdout, releaseHelp, fs.FlagUsages())
		}
		return exitOK, err
	}
	if !*force {
		return exitOK, usageIn("release", errors.New("release deletes the lock whoever holds it: say so with --force"))
	}
	locker, done, err := inspector(*url, "release")
	if err != nil {
		return exitOK, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	deleted, err := locker.ForceRelease(ctx, key)
	switch {
	case errors.Is(err, setnxlock.ErrNotLockValue):
		fmt.Fprintf(stderr, "setnxlock: %s, left alone\n", describe(deleted))
		return exitForeign, nil
	case err != nil:
		fmt.Fprintf(stderr, "setnxlock: %s: cannot release at %s: %v\n", key, redactURL(*url), err)
		return exitUnavailable, nil
	case !deleted.Exists:
		fmt.Fprintf(stdout, "%s: nothing to delete\n", key)
		return exitFree, nil
	}
	state := "a live lease, until"
	if !deleted.Held {
		state = "a lease that had ended at"
	}
	fmt.Fprintf(stdout, "%s: deleted %q (%s %s, %s)\n", key, deleted.Value, state, stamp(deleted.ExpiresAt), formatNames[deleted.Format])
	return exitOK, nil
}
