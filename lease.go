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

	done       chan struct{} // closed once, by conclude, when the Lock is released or lost
	ended      sync.Once
	moved      chan struct{} // nudges the keeper (keeper.go) when the end moves
	keeping    sync.Once
	keeperDone chan struct{} // closed when the keeper goroutine has returned; nil if none started
}

func newLease(start, end time.Time) *lease {
	return &lease{renewedAt: start, expiresAt: end, done: make(chan struct{}), moved: make(chan struct{}, 1)}
}

// ends returns the end of the lease.
func (s *lease) ends() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	if s.over() {
		s.mu.Unlock()
		return false
	}
	s.renewedAt, s.expiresAt = start, end
	s.mu.Unlock()
	select {
	case s.moved <- struct{}{}:
	default: // a nudge is already pending
	}
	return true
}

// conclude ends the Lock's life with err (nil for a release), and reports
// whether this call ended it: only the first does.
func (s *lease) conclude(err error) (ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.concludeLocked(err)
}

// runOut ends the Lock's life as lost if its lease has ended by now, and
// reports whether it did; err describes the loss given the lease's end.
// Checking the end and ending the life are one step, so a renewal that
// moves the end (move) is either seen here or refused there, never both.
func (s *lease) runOut(now time.Time, err func(ends time.Time) error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over() || !expired(s.expiresAt, now) {
		return false
	}
	return s.concludeLocked(err(s.expiresAt))
}

func (s *lease) concludeLocked(err error) (ended bool) {
	s.ended.Do(func() {
		s.err = err
		close(s.done)
		ended = true
	})
	return ended
}

// over reports whether the Lock's life has ended.
func (s *lease) over() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// reason returns why the Lock's life ended: nil while it lasts or after a
// release, an error matching ErrNotHeld after a loss.
func (s *lease) reason() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
