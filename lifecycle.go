package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A lock's life ends when it is released or lost. Done and Err report it;
// Context turns it into cancellation; the keeper goroutine notices a loss
// nobody asked about (H8): the lease running out, or, with auto-refresh, a
// renewal refused because the key is no longer ours.

// errReleased is the cause of a Context cancelled by a successful Release.
var errReleased = errors.New("setnxlock: lock released")

// errNilLock is what the methods of a nil *Lock report: it holds nothing.
// It is common to write defer lock.Release(ctx) before checking the error
// of the acquisition that returned the nil Lock.
var errNilLock = fmt.Errorf("%w: nil Lock", ErrNotHeld)

// closedChannel is a nil Lock's Done: it holds nothing, so it is over.
var closedChannel = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done returns a channel that is closed once the lock has been released or
// lost. Without auto-refresh a lock is lost when its lease runs out by the
// Locker's clock, or when Refresh or Release finds the key no longer ours.
// A nil Lock, which holds nothing, returns a closed channel.
func (k *Lock) Done() <-chan struct{} {
	if k == nil {
		return closedChannel
	}
	k.startKeeper()
	return k.lease.done
}

// Err returns nil while the lock is held and after a successful Release,
// and an error matching ErrNotHeld once the lock has been lost, or when k
// is nil.
func (k *Lock) Err() error {
	if k == nil {
		return errNilLock
	}
	return k.lease.reason()
}

// Context returns a context derived from parent that is cancelled when the
// lock is released or lost, so work under the lock can stop. After a loss
// context.Cause reports an error matching ErrNotHeld; for a nil Lock the
// context is cancelled from the start, with that cause.
func (k *Lock) Context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	if k == nil {
		cancel(errNilLock)
		return ctx
	}
	done := k.Done()
	go func() {
		select {
		case <-done:
			if err := k.Err(); err != nil {
				cancel(err)
			} else {
				cancel(errReleased)
			}
		case <-ctx.Done():
		}
	}()
	return ctx
}

// finish moves the lock to state, released or lost, and ends its life with
// err (nil for a release) the first time it is called; it returns err,
// except that a release confirmed after the lease ran out unconfirmed
// reports that loss, as Done and Err have (H11).
func (k *Lock) finish(state lockState, err error) error {
	k.state.settle(state)
	if k.lease.conclude(k.locker.cfg.clock.Now(), err, k.announceEnd) {
		return err
	}
	if lost := k.Err(); err == nil && errors.As(lost, new(ranOut)) {
		return lost
	}
	return err
}

// ranOut is the loss of a lease whose end came, by the Locker's clock,
// before Redis confirmed a renewal or a release (H11).
type ranOut struct {
	key string
	at  time.Time
}

func (e ranOut) Error() string {
	return fmt.Sprintf("%v: the lease on %q ran out at %s", ErrNotHeld, e.key, e.at.UTC().Format(time.RFC3339Nano))
}

func (e ranOut) Unwrap() error { return ErrNotHeld }

// announceEnd tells the observer how the lock's life ended, and how long
// it was held: until now for a release, until the lease ended for a loss
// (its end, or the instant it was cut: heldUntil). It runs once, before
// lease.done closes.
func (k *Lock) announceEnd(err error) {
	l := k.locker
	if l.cfg.observer == nil {
		return
	}
	ended := l.cfg.clock.Now()
	e := Event{Kind: EventReleased, Key: k.key, ExpiresAt: k.lease.ends(), FencingToken: k.fencingToken, Err: err, Path: l.pathKind()}
	if err != nil {
		e.Kind, e.Path = EventLost, PathNone
		ended = earliest(ended, k.lease.heldUntil())
	}
	e.Held = max(ended.Sub(k.acquiredAt), 0)
	if l.cfg.calls != nil {
		k.ending = &e // for Release's CallResult (endEvent)
	}
	l.observe(e)
}

// endEvent is the event that announced the lock's end, once lease.done is
// closed and for a CallObserver only; Kind 0 otherwise.
func (k *Lock) endEvent() Event {
	select {
	case <-k.lease.done:
		if k.ending != nil {
			return *k.ending
		}
	default:
	}
	return Event{}
}

// refreshFailed reports a Refresh or a renewal that returned err.
func (k *Lock) refreshFailed(err error) {
	if err != nil {
		k.locker.observe(Event{Kind: EventRefreshFailed, Key: k.key, ExpiresAt: k.ExpiresAt(), FencingToken: k.fencingToken, Err: err})
	}
}

// endIfRunOut ends the lock as lost if its lease is over by the Locker's
// clock, and reports whether the lock's life has ended. It never waits for
// a round trip in flight (H11): a renewal that has not been confirmed by
// the lease's end comes too late, and one confirmed in time has moved the
// end already (lease.runOut and lease.move are one step each).
func (k *Lock) endIfRunOut() bool {
	k.lease.runOut(k.locker.cfg.clock.Now(), func(ends time.Time) error {
		return ranOut{key: k.key, at: ends}
	}, func(err error) {
		k.state.settle(lost)
		k.announceEnd(err)
	})
	return k.lease.over()
}
