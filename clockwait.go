package setnxlock

import (
	"sync"
	"time"
)

// Waiting for an instant of a Clock (a lease's end, a renewal): timers
// follow the clock they serve. A real timer runs on the local monotonic
// clock, but a Clock may move otherwise: a ServerClock re-measured, a wall
// clock stepped, a clock of the user's. So every wait is a real timer set
// for the instant as the clock reads it now, plus a second look whenever
// the clock may have moved: at once for a clock that says when it moves
// (ServerClock re-arms its waits after a measurement), every clockRecheck
// for any other. ManualClock, which moves only when told, keeps waits of
// its own (clock.go). None of these keeps a goroutine between checks.

// clockRecheck is how often the waits on a clock that does not say when it
// moves (the system clock, a Clock of the user's) read it again, so that a
// wait fires at most this late after the clock jumps past its instant. All
// such waits share one check per interval, whatever their number, and
// there is none while nobody waits.
const clockRecheck = 50 * time.Millisecond

// polledWaits are the waits on clocks that do not say when they move.
var polledWaits = clockWaits{recheckEvery: clockRecheck}

// clockWaits is a set of waits for instants of clocks.
type clockWaits struct {
	recheckEvery time.Duration // 0: the clock calls recheck whenever it moves

	mu       sync.Mutex
	waits    map[*clockWait]struct{}
	checking bool // a recheck is scheduled (recheckEvery > 0)
}

// clockWait is one wait: ch is filled, once, when clock reaches instant;
// the wait is dropped unfilled once abandon is closed.
type clockWait struct {
	clock   Clock
	instant time.Time
	abandon <-chan struct{}
	ch      chan time.Time
	timer   *time.Timer // set for instant as the clock read at the last check
}

// add starts a wait until clock reaches instant.
func (s *clockWaits) add(clock Clock, instant time.Time, abandon <-chan struct{}) <-chan time.Time {
	w := &clockWait{clock: clock, instant: instant, abandon: abandon, ch: make(chan time.Time, 1)}
	now := clock.Now() // read outside s.mu: a ServerClock's Now takes its own lock
	if !now.Before(instant) {
		w.ch <- now
		return w.ch
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waits == nil {
		s.waits = make(map[*clockWait]struct{})
	}
	s.waits[w] = struct{}{}
	w.timer = time.AfterFunc(instant.Sub(now), func() { s.check(w) })
	if s.recheckEvery > 0 && !s.checking {
		s.checking = true
		time.AfterFunc(s.recheckEvery, s.recheckAndReschedule)
	}
	return w.ch
}

// check reads w's clock: fills w once it has reached its instant, drops it
// if abandoned, and otherwise sets its timer for the instant as the clock
// now reads. Checking twice is harmless: a wait is filled at most once.
func (s *clockWaits) check(w *clockWait) {
	now := w.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, waiting := s.waits[w]; !waiting {
		return
	}
	switch {
	case isClosed(w.abandon):
		delete(s.waits, w)
		w.timer.Stop()
	case !now.Before(w.instant):
		delete(s.waits, w)
		w.timer.Stop()
		w.ch <- now
	default:
		w.timer.Reset(w.instant.Sub(now))
	}
}

// recheck checks every wait: the clock may have moved.
func (s *clockWaits) recheck() {
	s.mu.Lock()
	waits := make([]*clockWait, 0, len(s.waits))
	for w := range s.waits {
		waits = append(waits, w)
	}
	s.mu.Unlock()
	for _, w := range waits {
		s.check(w)
	}
}

// recheckAndReschedule is the periodic recheck, which ends while nobody
// waits.
func (s *clockWaits) recheckAndReschedule() {
	s.recheck()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waits) == 0 {
		s.checking = false
		return
	}
	time.AfterFunc(s.recheckEvery, s.recheckAndReschedule)
}

// isClosed reports whether ch is closed, without waiting; a nil channel
// never is.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
