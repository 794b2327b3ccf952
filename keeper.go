package setnxlock

import (
	"context"
	"time"
)

// The lease keeper: one goroutine per Lock, started with auto-refresh, by
// Done or by Do, that renews the lease every interval (with auto-refresh,
// or under Do whatever the options) until Release or Orphan, and ends the Lock's life when the lease runs out by
// the Locker's clock (H8, H11).

// Orphan stops renewing the lease and leaves it as it stands, as etcd's
// Session.Orphan stops its keep-alive: the key stays ours until the end the
// lease states (ExpiresAt), and is left to expire then. Done and Err still
// report that end by the Locker's clock: once the lease has run out the
// lock is lost (Err matches ErrNotHeld), as a lock without auto-refresh is.
// Release still gives the lock up early. Refresh still moves the end, once
// per call, and renewals stay off: a holder may orphan a lock, then set
// when its lease ends. A renewal already talking to Redis when Orphan is
// called may still complete (ExpiresAt then says so); none starts after.
// Without auto-refresh nothing renews the lease and Orphan changes
// nothing. It has no effect on a released or lost Lock, or on a nil one.
func (k *Lock) Orphan() {
	if k == nil {
		return
	}
	k.state.v.CompareAndSwap(int32(held), int32(orphaned))
}

// startKeeper starts, once, the keeper: the goroutine that renews the
// lease (auto-refresh) or watches it run out.
func (k *Lock) startKeeper() {
	k.lease.keeping.Do(func() {
		keeperDone := make(chan struct{})
		k.lease.mu.Lock()
		k.lease.keeperDone = keeperDone
		k.lease.moved = make(chan struct{}, 1) // before the keeper reads it
		k.lease.mu.Unlock()
		go func() {
			defer close(keeperDone)
			k.keep()
		}()
	})
}

// nudgeKeeper wakes the keeper to look at the lease again, as a move of
// its end does: it may be sleeping until the end, not renewing.
func (k *Lock) nudgeKeeper() { k.lease.nudge() }

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

// keep runs until the lock is over. With auto-refresh (or under Do) it renews the lease
// every interval, and a quarter interval after a renewal that failed on the
// network, until Release or Orphan is called; otherwise it only waits for the lease
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
		renewing := (l.cfg.autoRefresh || k.renewAlways.Load()) && k.state.load() == held
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
		if renewing && k.state.load() == held { // Release or Orphan may have come while we slept
			retryAt = time.Time{}
			if err := k.renew(); err != nil {
				// A refusal has ended the lock; anything else is retried soon.
				retryAt = wakeAt.Add(interval / 4)
			}
		}
	}
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
// ends the lock inside refresh. The state is read again in the Lock's
// turn: a renewal decided before Release or Orphan, and still waiting for
// the turn, writes nothing, so it never lands after an Orphan and the
// Refresh that follows it to set the lease's end.
func (k *Lock) renew() error {
	l := k.locker
	remaining := k.ExpiresAt().Sub(l.cfg.clock.Now())
	ctx, cancel := context.WithTimeout(context.Background(), remaining)
	defer cancel()
	err := k.inTurn(ctx, "refresh", func() error {
		if k.state.load() != held {
			return nil
		}
		return k.refresh(ctx, l.cfg.ttl)
	}, k.lostWith("refresh"))
	k.refreshFailed(err)
	return err
}
