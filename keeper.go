package setnxlock

import (
	"context"
	"time"
)

// The lease keeper: one goroutine per Lock, started with auto-refresh or
// by Done, that renews the lease every interval (auto-refresh) and ends
// the Lock's life when the lease runs out by the Locker's clock (H8, H11).

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
