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
	k.state.end(state)
	if k.lease.end(err) {
		k.announceEnd(err)
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

// announceEnd tells the observer how the lock's life ended.
func (k *Lock) announceEnd(err error) {
	e := Event{Kind: EventReleased, Key: k.key, ExpiresAt: k.ExpiresAt(), FencingToken: k.fencingToken, Err: err}
	if err != nil {
		e.Kind = EventLost
	}
	k.locker.observe(e)
}

// startKeeper starts, once, the keeper: the goroutine that renews the
// lease (auto-refresh) or watches it run out.
func (k *Lock) startKeeper() {
	k.lease.keeping.Do(func() {
		keeperDone := make(chan struct{})
		k.lease.mu.Lock()
		k.lease.keeperDone = keeperDone
		k.lease.mu.Unlock()
		go func() {
			defer close(keeperDone)
			k.keep()
		}()
	})
}

// awaitKeeper waits, at most until ctx ends, for the keeper goroutine to
// return once the lock is over, so that no goroutine outlives its lock.
func (k *Lock) awaitKeeper(ctx context.Context) {
	if !k.lease.over() {
		return // still held (a Release that failed in transit)
	}
	k.lease.mu.Lock()
	started := k.lease.keeperDone
	k.lease.mu.Unlock()
	if started != nil {
		select {
		case <-started:
		case <-ctx.Done():
		}
	}
}

// keep runs until the lock is over. With auto-refresh it renews the lease
// every interval, and a quarter interval after a renewal that failed on the
// network, until Release is called; otherwise it only waits for the lease
// to run out. It never sleeps past the end of the lease, and Refresh wakes
// it when it moves that end.
//
// Every instant it wakes at is computed from the lease itself (when it
// began, when it ends, when a renewal failed), never from when the
// goroutine happens to run, so a renewal is neither late nor early however
// the goroutine is scheduled against moves of the clock.
func (k *Lock) keep() {
	l := k.locker
	interval := l.cfg.refreshEvery()
	var retryAt time.Time // after a renewal failed on the network
	for {
		wakeAt, renewedAt := k.lease.ends(), k.lease.began()
		renewing := l.cfg.autoRefresh && k.state.load() == held
		if renewing {
			next := renewedAt.Add(interval)
			if !retryAt.IsZero() {
				next = retryAt
			}
			wakeAt = earliest(wakeAt, next)
		}
		select {
		case <-k.lease.done:
			return
		case <-k.lease.moved:
			continue
		case <-at(l.cfg.clock, wakeAt, k.lease.done):
		}
		if k.endIfRunOut() {
			return
		}
		if renewing && k.state.load() == held { // Release may have come while we slept
			retryAt = time.Time{}
			if err := k.renew(); err != nil {
				// A refusal has ended the lock; anything else is retried soon.
				retryAt = wakeAt.Add(interval / 4)
			}
		}
	}
}

// endIfRunOut ends the lock as lost if its lease is over by the Locker's
// clock, and reports whether the lock's life has ended. It never waits for
// a round trip in flight (H11): a renewal that has not been confirmed by
// the lease's end comes too late, and one confirmed in time has moved the
// end already (lease.runOut and lease.move are one step each).
func (k *Lock) endIfRunOut() bool {
	ranOut := k.lease.runOut(k.locker.cfg.clock.Now(), func(ends time.Time) error {
		return ranOut{key: k.key, at: ends}
	})
	if ranOut {
		k.state.end(lost)
		k.announceEnd(k.Err())
	}
	return k.lease.over()
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// renew refreshes the lease by the Locker's TTL, giving the round trip no
// longer than the lease has left (a client with ContextTimeoutEnabled ends
// it then; Refresh returns at the lease's end on any client). A refusal
// ends the lock inside Refresh.
func (k *Lock) renew() error {
	remaining := k.ExpiresAt().Sub(k.locker.cfg.clock.Now())
	ctx, cancel := context.WithTimeout(context.Background(), remaining)
	defer cancel()
	return k.Refresh(ctx, k.locker.cfg.ttl)
}
