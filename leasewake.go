package setnxlock

import (
	"context"
	"runtime"
	"time"
)

// Waking at a lease's end. A queued wait attempts again the moment the
// holder's lease is over by the Locker's clock (takeableAt: the stated end,
// the skew margin and the clock's uncertainty, H4), never earlier and not
// a jitter later: the queue, not jitter, orders queued waiters, and a
// takeover's losers write nothing (deadlock.go). Unqueued pollers, a herd
// that nothing orders, keep capAtLease's jitter.
//
// A Go timer fires late by up to about a millisecond (the runtime's
// poller sleeps in whole milliseconds), which would be most of a
// recovery's cost. So the timer is set timerLateness early, and the rest
// is waited out by yielding while the clock is short of the instant, for
// at most maxLeaseSpin of real time per lease end. A clock that does not
// reach the instant by then (a ManualClock, a ServerClock re-measured) is
// waited for as any clock is (clock.go), without spinning.

// timerLateness is how early the timer for a lease's end is set: about
// how late a Go timer fires.
const timerLateness = time.Millisecond

// maxLeaseSpin bounds, in real time, the yielding wait for a lease's end
// once its early timer fired.
const maxLeaseSpin = 2 * time.Millisecond

// leaseWake is the timer of a wait capped at a lease's end, set
// timerLateness early; remaining is the time left until takeableAt.
func leaseWake(remaining time.Duration) time.Duration {
	return max(remaining-timerLateness, 0)
}

// reached reports whether clock has reached instant: the lease it ends is
// over by the page's rule (expired).
func reached(clock Clock, instant time.Time) bool {
	return !clock.Now().Before(instant)
}

// spinUntil yields until clock reaches instant, for at most maxLeaseSpin
// of real time, and reports whether it did. It returns false at once once
// ctx has ended.
func spinUntil(ctx context.Context, clock Clock, instant time.Time) bool {
	deadline := time.Now().Add(maxLeaseSpin)
	for !reached(clock, instant) {
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return false
		}
		runtime.Gosched()
	}
	return true
}
