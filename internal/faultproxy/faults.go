package faultproxy

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Faults are the random faults the proxy injects, each drawn once per
// request. Rates are probabilities between 0 and 1; the zero value injects
// nothing.
type Faults struct {
	// Seed seeds every connection's generator, together with the
	// connection's number, so the same seed draws the same faults for the
	// nth request of the kth connection.
	Seed uint64
	// LatencyRate is the share of requests held back before they are
	// forwarded, each for a uniform draw from 0 to MaxLatency.
	LatencyRate float64
	// MaxLatency bounds one request's added latency.
	MaxLatency time.Duration
	// LoseRate is the share of requests that are forwarded and applied
	// while every later reply on their connection is swallowed: the client
	// times out on a command the server executed (H5).
	LoseRate float64
	// CutRate is the share of requests at which the connection is cut,
	// half of them before the request reaches the server and half right
	// after, when the server may apply it but its reply cannot return.
	CutRate float64
	// HoldRate is the share of requests held back in the proxy, each for a
	// uniform draw from MinHold to MaxHold, and then forwarded whether or
	// not the client still waits for it: a segment in retransmission, a
	// short partition (H10). With MinHold above the clients' ReadTimeout
	// the client has given up on it by then and gone on, on another
	// connection: its later requests reach the server first, and the held
	// one lands after them (Stats.Overtaken). Requests behind it on its own
	// connection wait for it, as behind a lost segment.
	HoldRate         float64
	MinHold, MaxHold time.Duration
}

// Stats counts the random faults injected so far.
type Stats struct {
	Delayed int // requests delayed (LatencyRate)
	Lost    int // requests whose replies were swallowed
	Cut     int // connections cut
	Held    int // requests held back (HoldRate)
	// Overtaken counts the held requests that reached the server after a
	// later request of the same client: one the client sent after it, on
	// any connection carrying the same client name (CLIENT SETNAME, or
	// HELLO's SETNAME; go-redis's Options.ClientName). A subset of Held,
	// counted once the held request is forwarded.
	Overtaken int
}

// Total is the number of faults of every kind.
func (s Stats) Total() int { return s.Delayed + s.Lost + s.Cut + s.Held }

// SetFaults replaces the random faults, for connections accepted from now
// on and for the next requests of open ones; the seed of connections
// already open is kept.
func (p *Proxy) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
	return nil
}

// Stats returns how many random faults the proxy has injected.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (f Faults) validate() error {
	for _, r := range []float64{f.LatencyRate, f.LoseRate, f.CutRate, f.HoldRate} {
		if r < 0 || r > 1 {
			return fmt.Errorf("faultproxy: rate %v is not between 0 and 1", r)
		}
	}
	if f.MaxLatency < 0 {
		return fmt.Errorf("faultproxy: negative latency %v", f.MaxLatency)
	}
	if f.MinHold < 0 || f.MaxHold < f.MinHold {
		return fmt.Errorf("faultproxy: hold from %v to %v is not a range of durations", f.MinHold, f.MaxHold)
	}
	return nil
}

type cutPoint int

const (
	noCut cutPoint = iota
	cutBefore
	cutAfter
)

// fault is what happens to one request.
type fault struct {
	delay time.Duration
	hold  time.Duration
	lose  bool
	cut   cutPoint
}

// draw chooses one request's faults. It always consumes the same number of
// draws, whatever the rates, so that changing one rate does not reshuffle
// the others' schedule.
func (f Faults) draw(rng *rand.Rand) fault {
	latency, amount, lose, cut, half := rng.Float64(), rng.Float64(), rng.Float64(), rng.Float64(), rng.IntN(2)
	hold, held := rng.Float64(), rng.Float64()
	var out fault
	if latency < f.LatencyRate && f.MaxLatency > 0 {
		out.delay = time.Duration(amount * float64(f.MaxLatency))
	}
	if hold < f.HoldRate && f.MaxHold > 0 {
		out.hold = f.MinHold + time.Duration(held*float64(f.MaxHold-f.MinHold))
	}
	out.lose = lose < f.LoseRate
	if cut < f.CutRate {
		out.cut = cutBefore + cutPoint(half)
	}
	return out
}

func (s *Stats) add(f fault) {
	if f.delay > 0 {
		s.Delayed++
	}
	if f.hold > 0 {
		s.Held++
	}
	if f.lose {
		s.Lost++
	}
	if f.cut != noCut {
		s.Cut++
	}
}
