package main

import (
	"context"
	"errors"
	"time"

	"github.com/setnxlock/setnxlock"
)

// keeper renews a lease every TTL/3 while the command runs. The library's
// WithAutoRefresh does the same, but cannot be stopped without releasing,
// and --min-hold needs to stop renewing and leave the lease to end at a
// chosen instant. A renewal that fails on the network is retried a quarter
// interval later; one refused because the key is no longer ours ends the
// keeper, and the library closes lock.Done.
//
// The keeper never decides when the command must die: supervise does, by
// its own timer on lock.ExpiresAt (deadline.go), whatever a renewal is
// doing. After each renewal the keeper nudges renewed so that supervise
// re-reads ExpiresAt, which a confirmed renewal moves forward.
type keeper struct {
	stop    chan struct{}
	done    chan struct{}
	renewed chan struct{} // buffered 1: a renewal returned; ExpiresAt may have moved
}

func keepLease(lock *setnxlock.Lock, ttl time.Duration, out *reporter) *keeper {
	k := &keeper{stop: make(chan struct{}), done: make(chan struct{}), renewed: make(chan struct{}, 1)}
	interval := ttl / 3
	go func() {
		defer close(k.done)
		next := interval
		for {
			timer := time.NewTimer(next)
			select {
			case <-k.stop:
				timer.Stop()
				return
			case <-lock.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			// H11: each round trip ends within the interval and within what
			// the lease has left (newClient makes go-redis honour the
			// deadline), so a renewal never outlives the lease it renews.
			left := time.Until(lock.ExpiresAt())
			if left <= 0 {
				return // the lease is over by our clock: nothing left to renew
			}
			ctx, cancel := context.WithTimeout(context.Background(), min(interval, left))
			err := lock.Refresh(ctx, ttl)
			cancel()
			select {
			case k.renewed <- struct{}{}:
			default: // a nudge is pending already
			}
			switch {
			case err == nil:
				next = interval
			case errors.Is(err, setnxlock.ErrNotHeld):
				return // lock.Done is closed: supervise kills the command
			default:
				out.say("renewal failed, retrying: %v", err)
				next = max(interval/4, time.Millisecond)
			}
		}
	}()
	return k
}

// Stop ends the renewals and returns once no renewal is in flight.
func (k *keeper) Stop() {
	close(k.stop)
	<-k.done // bounded: a renewal in flight ends within its deadline (newClient honours it)
}
