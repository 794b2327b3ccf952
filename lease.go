package setnxlock

import (
	"sync"
	"time"
)

// lease is the lease of a Lock, kept apart from its ownership (as etcd
// keeps its Session apart from its Mutex): when it began and when it ends
// by the Locker's clock, and how the Lock's life ended. Reading it never
// waits on Redis: its own mutex guards it, not the Lock's turn to talk to
// Redis (Lock.op).
type lease struct {
	mu        sync.Mutex
	renewedAt time.Time // when the current lease began: renewals count their interval from here
	expiresAt time.Time // when it ends by the Locker's clock
	err       error     // why the Lock's life ended: nil after Release, ErrNotHeld after a loss
	cut       time.Time // a loss before expiresAt: when it ended the holder's lease (heldUntil); zero otherwise
	ended     bool      // the Lock's life has ended: err says why

	done       chan struct{} // closed by conclude or runOut once the end has been announced
	moved      chan struct{} // guarded by mu: nudges the keeper (keeper.go) when the end moves; made when it starts, nil before
	keeping    sync.Once
	keeperDone chan struct{} // closed when the keeper goroutine has returned; nil if none started
}

// init sets up a zero lease, in place (newLock allocates it with its
// Lock), as one that began at start and ends at end.
func (s *lease) init(start, end time.Time) {
	s.renewedAt, s.expiresAt = start, end
	s.done = make(chan struct{})
}

// nudge wakes the keeper, if one has started, to look at the lease
// again. A keeper that starts later looks at it first anyway.
func (s *lease) nudge() {
	s.mu.Lock()
	moved := s.moved
	s.mu.Unlock()
	select {
	case moved <- struct{}{}: // a nil channel, no keeper: never
	default: // a nudge is already pending
	}
}

// ends returns the end of the lease as Redis confirmed it, which a loss
// does not move (heldUntil does).
func (s *lease) ends() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expiresAt
}

// heldUntil returns until when the holder may act on the lease: its end,
// or the instant a loss cut it short (conclude).
func (s *lease) heldUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.cut.IsZero() {
		return s.cut
	}
	return s.expiresAt
}

// began returns when the current lease began.
func (s *lease) began() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewedAt
}

// move records a lease that began at start and ends at end, and wakes the
// keeper, which may be sleeping until the old end. It reports false, and
// changes nothing, once the Lock's life has ended: a renewal whose reply
// comes after the lease ran out cannot bring the lock back (H11).
func (s *lease) move(start, end time.Time) bool {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return false
	}
	s.renewedAt, s.expiresAt = start, end
	s.mu.Unlock()
	s.nudge()
	return true
}

// conclude ends the Lock's life at now with err (nil for a release), and
// reports whether this call ended it: only the first does. A loss ends
// the holder's lease with the life: one that still had time left is cut
// at now (heldUntil), so a holder that checks ExpiresAt before each write
// stops here, before the key it no longer holds is given back or taken (a
// claim refused or beaten while the provisional hold had time left,
// heard.go; a Refresh that found the key not ours). The call that ends it runs announce before it closes
// done, so whoever is woken by Done, or by the Release or Refresh that
// returns on it, finds the observer told.
func (s *lease) conclude(now time.Time, err error, announce func(error)) (ended bool) {
	s.mu.Lock()
	ended = s.endLocked(err)
	if ended && err != nil && s.expiresAt.After(now) {
		s.cut = now
	}
	s.mu.Unlock()
	if ended {
		s.announced(err, announce)
	}
	return ended
}

// runOut ends the Lock's life as lost if its lease has ended by now, and
// reports whether it did; err describes the loss given the lease's end,
// and announce runs as conclude's does. Checking the end and ending the
// life are one step, so a renewal that moves the end (move) is either
// seen here or refused there, never both.
func (s *lease) runOut(now time.Time, err func(ends time.Time) error, announce func(error)) bool {
	s.mu.Lock()
	if s.ended || !expired(s.expiresAt, now) {
		s.mu.Unlock()
		return false
	}
	lost := err(s.expiresAt)
	s.endLocked(lost)
	s.mu.Unlock()
	s.announced(lost, announce)
	return true
}

// endLocked records the end of the Lock's life, once; the caller holds mu.
func (s *lease) endLocked(err error) (ended bool) {
	if s.ended {
		return false
	}
	s.ended, s.err = true, err
	return true
}

// announced runs announce outside mu (the observer may read the Lock),
// then closes done.
func (s *lease) announced(err error, announce func(error)) {
	defer close(s.done)
	announce(err)
}

// over reports whether the Lock's life has ended.
func (s *lease) over() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// reason returns why the Lock's life ended: nil while it lasts or after a
// release, an error matching ErrNotHeld after a loss.
func (s *lease) reason() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
