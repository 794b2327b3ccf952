package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/setnxlock/setnxlock"
)

// reporter writes setnxlock's own lines to stderr: always for what changes
// the outcome (a lost lease, a kill, an error), and with -v also for each
// step of the lock's life. Lines are whole: one write each.
type reporter struct {
	mu      sync.Mutex
	w       io.Writer
	key     string
	verbose bool
	waiting bool // "waiting" was said once already
}

// warn always writes.
func (r *reporter) warn(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "setnxlock: %s: %s\n", r.key, fmt.Sprintf(format, args...))
}

// say writes only with -v.
func (r *reporter) say(format string, args ...any) {
	if r.verbose {
		r.warn(format, args...)
	}
}

// stamp formats an instant as the CLI shows it everywhere: RFC 3339 in UTC
// with milliseconds, the resolution of the stored values.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// Observe reports the Locker's events with -v; contention once.
func (r *reporter) Observe(e setnxlock.Event) {
	switch e.Kind {
	case setnxlock.EventContended:
		r.mu.Lock()
		first := !r.waiting
		r.waiting = true
		r.mu.Unlock()
		if first {
			r.say("held by another client until %s", stamp(e.ExpiresAt))
		}
	case setnxlock.EventAcquired, setnxlock.EventRecovered:
		how := "acquired"
		if e.Kind == setnxlock.EventRecovered {
			how = "taken over from a holder whose lease had ended"
		}
		if e.FencingToken != 0 {
			how += fmt.Sprintf(", fencing token %d", e.FencingToken)
		}
		r.say("%s, lease until %s", how, stamp(e.ExpiresAt))
	case setnxlock.EventRefreshed:
		r.say("renewed, lease until %s", stamp(e.ExpiresAt))
	case setnxlock.EventReleased:
		r.say("released")
	case setnxlock.EventLost:
		r.say("lost: %v", e.Err)
	}
}
