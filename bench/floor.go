package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// pingsPerRound is how many sequential PINGs measure one round's
// round-trip time, spread over the round's cases.
const pingsPerRound = 3000

// rttProbe measures the round-trip time to the server with sequential
// PINGs on a client of its own, in bursts between the contenders' runs, so
// that it sees the same machine as they do.
type rttProbe struct {
	client  *redis.Client
	samples []time.Duration // this round's
}

// newRTTProbe opens the probe's client and its connection.
func newRTTProbe(addr string) (*rttProbe, error) {
	p := &rttProbe{client: redis.NewClient(&redis.Options{Addr: addr})}
	if err := p.client.Ping(context.Background()).Err(); err != nil {
		_ = p.client.Close()
		return nil, fmt.Errorf("PING: %w", err)
	}
	return p, nil
}

// burst times n PINGs, one after another.
func (p *rttProbe) burst(n int) error {
	ctx := context.Background()
	for range n {
		start := time.Now()
		if err := p.client.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("PING: %w", err)
		}
		p.samples = append(p.samples, time.Since(start))
	}
	return nil
}

// endRound returns the median of the round's PINGs and starts a new round.
func (p *rttProbe) endRound() time.Duration {
	slices.Sort(p.samples)
	rtt := percentile(p.samples, 50)
	p.samples = p.samples[:0]
	return rtt
}

// close closes the probe's client.
func (p *rttProbe) close() error { return p.client.Close() }

// floorRate is the most cycles per second the round trips allow in c, or 0
// where no such floor applies (the crash case). One worker's cycle is at
// least two round trips, the acquire's and the release's, plus the hold;
// under contention, cycles overlap, and what cannot overlap is the hold and
// one round trip per handoff: half of one for the winner's reply to reach
// it, half of one for its release to reach the server. A semaphore's
// permits turn over side by side: its floor is that many locks'. A
// read/write lock has none: how many readers overlap depends on the draw
// of the writes.
func floorRate(c caseSpec, rtt time.Duration) float64 {
	if c.crash || c.writePercent > 0 || rtt <= 0 {
		return 0
	}
	trips := time.Duration(1)
	if c.workers == 1 {
		trips = 2
	}
	return float64(max(c.permits, 1)) / (c.hold + trips*rtt).Seconds()
}
