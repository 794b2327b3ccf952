package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/setnxlock/setnxlock"
)

// rwJSON is status --rw --json's one object.
type rwJSON struct {
	Name    string       `json:"name"`
	Writer  statusJSON   `json:"writer"`  // status --json's object for WriterKey(name): held while a writer holds it or drains the readers
	Readers []statusJSON `json:"readers"` // one per live reader
	Foreign []string     `json:"foreign"` // reader keys that hold something that is not a lock value
}

// rwStatusCommand is status --rw NAME: the read/write lock's writer key,
// its queue and live readers, writing nothing. Its exit status is 0 when
// a writer or a reader holds it, else 4 when one of its keys holds
// something that is not a lock value, else 3.
func rwStatusCommand(ctx context.Context, locker *setnxlock.Locker, name string, asJSON bool, url string, stdout, stderr io.Writer) (int, error) {
	rw, err := locker.RWLock(name)
	if err != nil {
		return exitOK, usageIn("status", err)
	}
	status, err := rw.Status(ctx)
	switch {
	case errors.Is(err, setnxlock.ErrNotLockValue):
		fmt.Fprintf(stderr, "setnxlock: %s: %v\n", name, err)
		return exitForeign, nil
	case err != nil:
		fmt.Fprintf(stderr, "setnxlock: %s: cannot read the read/write lock at %s: %v\n", name, redactURL(url), err)
		return exitUnavailable, nil
	}
	if asJSON {
		object := rwJSON{Name: status.Name, Writer: toJSON(status.Writer), Readers: []statusJSON{}, Foreign: []string{}}
		for _, r := range status.Readers {
			object.Readers = append(object.Readers, toJSON(r))
		}
		object.Foreign = append(object.Foreign, status.Foreign...)
		data, _ := json.Marshal(object) // plain strings, bools and numbers always encode
		fmt.Fprintln(stdout, string(data))
	} else {
		fmt.Fprint(stdout, describeRW(status))
	}
	return rwStatusCode(status), nil
}

// rwStatusCode is status --rw's exit status.
func rwStatusCode(s setnxlock.RWLockStatus) int {
	switch {
	case s.Writer.Held || len(s.Readers) > 0:
		return exitOK
	case s.Writer.Foreign || len(s.Foreign) > 0:
		return exitForeign
	}
	return exitFree
}

// describeRW is status --rw's lines for people: a summary, the writer key
// as status describes a key, then one line per live reader.
func describeRW(s setnxlock.RWLockStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d readers, writer key %s\n", s.Name, len(s.Readers), describe(s.Writer))
	for _, r := range s.Readers {
		fmt.Fprintf(&b, "  reader %s\n", describe(r))
	}
	for _, key := range s.Foreign {
		fmt.Fprintf(&b, "  %s: holds something that is not a lock value\n", key)
	}
	return b.String()
}
