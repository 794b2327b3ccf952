package chaos

import (
	"math/rand/v2"
	"time"
)

// The faults the harness injects into a client at the resource: at each
// write, right after each grant and at each release, drawn from the
// client's own seeded streams.

// action is what the harness does to a client at one of its writes.
type action int

const (
	actNone  action = iota
	actCrash        // kill the process with SIGKILL, or tell the goroutine to abandon its lock
	actPause        // stop the process (SIGSTOP) or stall the goroutine past its lease, then let the write through
)

// faultPlan decides what happens to one client: at each write, right
// after each grant, and at each release.
type faultPlan interface {
	next() (action, time.Duration)
	afterGrant() (pause bool, d time.Duration)
	atRelease() (kill bool, delay time.Duration)
}

// clientHooks is what the resource needs from the harness for one client.
type clientHooks struct {
	plan  faultPlan
	kill  func(kind string) bool // SIGKILL the process; false for a goroutine client, told to crash instead
	pause func(kind string, d time.Duration, stop <-chan struct{})
}

// randomPlan draws each fault from the client's own streams.
type randomPlan struct {
	rng, grants, releases                *rand.Rand
	crashRate, pauseRate, grantPauseRate float64
	releaseKillRate                      float64
	ttl                                  time.Duration
}

// next draws twice whatever the rates, so the schedule of one fault does
// not depend on the other's rate.
func (p *randomPlan) next() (action, time.Duration) {
	x, length := p.rng.Float64(), p.rng.Float64()
	switch {
	case x < p.crashRate:
		return actCrash, 0
	case x < p.crashRate+p.pauseRate:
		return actPause, p.pastLease(length)
	}
	return actNone, 0
}

func (p *randomPlan) afterGrant() (bool, time.Duration) {
	x, length := p.grants.Float64(), p.grants.Float64()
	return x < p.grantPauseRate, p.pastLease(length)
}

func (p *randomPlan) atRelease() (bool, time.Duration) {
	x, delay := p.releases.Float64(), p.releases.Float64()
	return x < p.releaseKillRate, time.Duration(delay * float64(2*time.Millisecond))
}

// pastLease is a pause from one lease to two.
func (p *randomPlan) pastLease(length float64) time.Duration {
	return p.ttl + time.Duration(length*float64(p.ttl))
}
