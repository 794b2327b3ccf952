package setnxlock

import (
	"sync"
	"time"
)

// Clock is the single source of "now" for a Locker. Every timestamp the
// Locker writes or compares comes from it (H4), so tests can move time and
// production can choose a clock that all lock users agree on.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// systemClock is the default Clock: the local wall clock.
type systemClock struct{}

// Now returns time.Now().
func (systemClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to. It is safe for
// concurrent use, so one ManualClock can drive several Lockers in a test:
// crash a holder by never releasing it, then Advance past its lease.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock that reads t until Set or Advance.
func NewManualClock(t time.Time) *ManualClock {
	return &ManualClock{now: t}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, forwards or backwards.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock forward by d (backwards if d is negative).
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
