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

// awaitWatch waits for the watch goroutine to return once the lock is over,
// so that no goroutine outlives its lock.
func (k *Lock) awaitWatch() {
	select {
	case <-k.done:
	default:
		return // still held (a Release that failed in transit)
	}
	k.mu.Lock()
	started := k.watchDone
	k.mu.Unlock()
	if started != nil {
		<-started
	}
}

// watch runs until the lock is over. With auto-refresh it renews the lease
// every interval, and a quarter interval after a renewal that failed on the
// network; otherwise it only waits for the lease to run out. It never waits
// past the end of the lease, where the lock is lost.
func (k *Lock) watch() {
	l := k.locker
	interval := l.cfg.refreshEvery()
	for {
		wait := k.ExpiresAt().Sub(l.cfg.clock.Now())
		if l.cfg.autoRefresh {
			wait = min(interval, wait)
		}
		select {
		case <-k.done:
			return
		case <-after(l.cfg.clock, wait):
		}
		if ends := k.ExpiresAt(); expired(ends, l.cfg.clock.Now()) {
			k.finish(fmt.Errorf("%w: the lease on %q ran out at %s", ErrNotHeld, k.key, ends.UTC().Format(time.RFC3339Nano)))
			return
		}
		if l.cfg.autoRefresh {
			interval = l.cfg.refreshEvery()
			if err := k.renew(); err != nil {
				interval /= 4 // a refusal has ended the lock; anything else is retried soon
			}
		}
	}
}

// renew refreshes the lease by the Locker's TTL, giving the round trip no
// longer than the lease has left. A refusal ends the lock inside Refresh.
func (k *Lock) renew() error {
	remaining := k.ExpiresAt().Sub(k.locker.cfg.clock.Now())
	ctx, cancel := context.WithTimeout(context.Background(), remaining)
	defer cancel()
	return k.Refresh(ctx, k.locker.cfg.ttl)
}
