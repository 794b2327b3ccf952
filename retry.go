package setnxlock

import (
	"math/rand/v2"
	"time"
)

// backoff yields Acquire's waits: exponential from min to max, each drawn
// from the upper half of its step so that waiters do not wake in lockstep.
type backoff struct {
	step, max time.Duration
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{step: min, max: max}
}

// next returns the next wait and doubles the step up to max.
func (b *backoff) next() time.Duration {
	wait := b.step/2 + rand.N(b.step/2+1)
	if b.step < b.max {
		b.step = min(2*b.step, b.max)
	}
	return wait
}

// maxLeaseJitter bounds the jitter added after a holder's lease ends.
const maxLeaseJitter = 2 * time.Millisecond

// capAtLease shortens wait so the next attempt comes right after the holder's
// lease ends (remaining may be negative when it already has), plus a little
// jitter, at most min(minBackoff, maxLeaseJitter), so that waiters on the
// same expiry do not all take over at the same instant. It serves the
// waits outside the queue, a herd that nothing orders; a queued wait
// attempts exactly at the lease's end (leasewake.go).
func capAtLease(wait, remaining, minBackoff time.Duration) time.Duration {
	if remaining >= wait {
		return wait
	}
	return max(remaining, 0) + rand.N(min(minBackoff, maxLeaseJitter)+1)
}
