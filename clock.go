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
	mu      sync.Mutex
	now     time.Time
	waiters []manualWaiter
}

// manualWaiter is a channel that After fills once the clock reaches at,
// unless abandon is closed first.
type manualWaiter struct {
	at      time.Time
	ch      chan time.Time
	abandon <-chan struct{}
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

// Set moves the clock to t, forwards or backwards, and wakes the waiters
// whose time has come.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	c.wake()
}

// Advance moves the clock forward by d (backwards if d is negative), and
// wakes the waiters whose time has come.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.wake()
}

// After returns a channel that receives the clock's time once Set or
// Advance has moved it d past now, like time.After on real time. The
// Locker's background work (auto-refresh, the lost-lease watch) waits on
// the clock the same way, so a test drives that work by moving the clock.
func (c *ManualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.afterLocked(c.now.Add(d), nil)
}

// waitUntil returns a channel filled once the clock reaches instant, which
// unlike After cannot drift when the clock moves between reading Now and
// asking to wait. The wait is forgotten, unfilled, once abandon is closed.
func (c *ManualClock) waitUntil(instant time.Time, abandon <-chan struct{}) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.afterLocked(instant, abandon)
}

func (c *ManualClock) afterLocked(instant time.Time, abandon <-chan struct{}) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, manualWaiter{at: instant, ch: ch, abandon: abandon})
	c.wake()
	return ch
}

// wake fills and forgets the waiters due at the current time, and forgets
// the abandoned ones. c.mu is held.
func (c *ManualClock) wake() {
	pending := c.waiters[:0]
	for _, w := range c.waiters {
		switch {
		case isClosed(w.abandon):
		case w.at.After(c.now):
			pending = append(pending, w)
		default:
			w.ch <- c.now
		}
	}
	clear(c.waiters[len(pending):])
	c.waiters = pending
}

// instantClock is a Clock that wakes a goroutine at an instant of its own
// time however it moves: ManualClock, and ServerClock, which re-arms its
// waits whenever a measurement moves it. Waits on any other clock re-read
// it every clockRecheck (clockwait.go).
type instantClock interface {
	waitUntil(instant time.Time, abandon <-chan struct{}) <-chan time.Time
}

// at fills the returned channel once the clock reaches instant, by that
// clock, however it moves meanwhile. A caller that stops waiting closes
// abandon (or ends what it is), so that the wait is dropped; an abandoned
// wait keeps no goroutine, and nothing at all past its instant.
func at(c Clock, instant time.Time, abandon <-chan struct{}) <-chan time.Time {
	if w, ok := c.(instantClock); ok {
		return w.waitUntil(instant, abandon)
	}
	return polledWaits.add(c, instant, abandon)
}

// uncertainClock is a Clock that knows how far it may be from the time it
// follows: ServerClock. Uncertainty bounds that error at the moment it is
// called.
type uncertainClock interface {
	Uncertainty() time.Duration
}

// uncertaintyOf is how far c may be from the time it follows: its
// Uncertainty when it reports one, else zero.
func uncertaintyOf(c Clock) time.Duration {
	if u, ok := c.(uncertainClock); ok {
		return u.Uncertainty()
	}
	return 0
}
