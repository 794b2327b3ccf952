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
// keeper, and the library closes lock.Done (as it does when the lease runs
// out by the clock while renewals fail).
type keeper struct {
	stop chan struct{}
	done chan struct{}
}

func keepLease(lock *setnxlock.Lock, ttl time.Duration, out *reporter) *keeper {
	k := &keeper{stop: make(chan struct{}), done: make(chan struct{})}
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
			// Each round trip ends within the interval, so a hung server
			// cannot hold a renewal past the lease.
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			err := lock.Refresh(ctx, ttl)
			cancel()
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
	<-k.done // bounded: a renewal in flight ends within its interval's timeout
}
