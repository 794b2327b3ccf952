package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A lock's life ends when it is released or lost. Done and Err report it;
// Context turns it into cancellation; the watch goroutine notices a loss
// nobody asked about (H8): the lease running out, or, with auto-refresh, a
// renewal refused because the key is no longer ours.

// errReleased is the cause of a Context cancelled by a successful Release.
var errReleased = errors.New("setnxlock: lock released")

// Done returns a channel that is closed once the lock has been released or
// lost. Without auto-refresh a lock is lost when its lease runs out by the
// Locker's clock, or when Refresh or Release finds the key no longer ours.
func (k *Lock) Done() <-chan struct{} {
	k.startWatch()
	return k.done
}

// Err returns nil while the lock is held and after a successful Release,
// and an error matching ErrNotHeld once the lock has been lost.
func (k *Lock) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Context returns a context derived from parent that is cancelled when the
// lock is released or lost, so work under the lock can stop. After a loss
// context.Cause reports an error matching ErrNotHeld.
func (k *Lock) Context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
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

// finish ends the lock's life with err (nil for a release) the first time
// it is called, and returns err.
func (k *Lock) finish(err error) error {
	k.finished.Do(func() {
		k.mu.Lock()
		k.err = err
		k.mu.Unlock()
		close(k.done)
		e := Event{Kind: EventReleased, Key: k.key, ExpiresAt: k.ExpiresAt(), FencingToken: k.fencingToken, Err: err}
		if err != nil {
			e.Kind = EventLost
		}
		k.locker.observe(e)
	})
	return err
}

// startWatch starts the goroutine that keeps or watches the lease, once.
func (k *Lock) startWatch() {
	k.watching.Do(func() {
		watchDone := make(chan struct{})
		k.mu.Lock()
		k.watchDone = watchDone
		k.mu.Unlock()
		go func() {
			defer close(watchDone)
			k.watch()
		}()
	})
}

// awaitWatch waits, at most until ctx ends, for the watch goroutine to
// return once the lock is over, so that no goroutine outlives its lock.
func (k *Lock) awaitWatch(ctx context.Context) {
	select {
	case <-k.done:
	default:
		return // still held (a Release that failed in transit)
	}
	k.mu.Lock()
	started := k.watchDone
	k.mu.Unlock()
	if started != nil {
		select {
		case <-started:
		case <-ctx.Done():
		}
	}
}

// watch runs until the lock is over. With auto-refresh it renews the lease
// every interval, and a quarter interval after a renewal that failed on the
// network, until Release is called; otherwise it only waits for the lease
// to run out. It never sleeps past the end of the lease, and Refresh wakes
// it when it moves that end.
//
// Every instant it wakes at is computed from the lease itself (when it
// began, when it ends, when a renewal failed), never from when the
// goroutine happens to run, so a renewal is neither late nor early however
// the goroutine is scheduled against moves of the clock.
func (k *Lock) watch() {
	l := k.locker
	interval := l.cfg.refreshEvery()
	var retryAt time.Time // after a renewal failed on the network
	for {
		k.mu.Lock()
		wakeAt, renewedAt := k.expiresAt, k.renewedAt
		k.mu.Unlock()
		renewing := l.cfg.autoRefresh && !k.releasing.Load()
		if renewing {
			next := renewedAt.Add(interval)
			if !retryAt.IsZero() {
				next = retryAt
			}
			wakeAt = earliest(wakeAt, next)
		}
		select {
		case <-k.done:
			return
		case <-k.moved:
			continue
		case <-at(l.cfg.clock, wakeAt):
		}
		if k.endIfRunOut() {
			return
		}
		if renewing && !k.releasing.Load() { // Release may have come while we slept
			retryAt = time.Time{}
			if err := k.renew(); err != nil {
				// A refusal has ended the lock; anything else is retried soon.
				retryAt = wakeAt.Add(interval / 4)
			}
		}
	}
}

// endIfRunOut ends the lock as lost if its lease is over. It takes the op
// slot, so it never declares a loss while a Refresh is in flight that may
// yet move the lease.
func (k *Lock) endIfRunOut() bool {
	_ = k.lockOp(context.Background(), "watch")
	defer k.unlockOp()
	select {
	case <-k.done:
		return true
	default:
	}
	ends := k.ExpiresAt()
	if !expired(ends, k.locker.cfg.clock.Now()) {
		return false
	}
	k.finish(fmt.Errorf("%w: the lease on %q ran out at %s", ErrNotHeld, k.key, ends.UTC().Format(time.RFC3339Nano)))
	return true
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// renew refreshes the lease by the Locker's TTL, giving the round trip no
// longer than the lease has left. A refusal ends the lock inside Refresh.
func (k *Lock) renew() error {
	remaining := k.ExpiresAt().Sub(k.locker.cfg.clock.Now())
	ctx, cancel := context.WithTimeout(context.Background(), remaining)
	defer cancel()
	return k.Refresh(ctx, k.locker.cfg.ttl)
}
