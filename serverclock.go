package setnxlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerClock is a Clock that follows the Redis server's TIME instead of
// the local clock (H4). Now is a local read: the server's time at the last
// measurement plus the time elapsed since on the local monotonic clock. The
// server's time is measured when the clock is made and again every refresh
// interval in the background until Close. On Redis Cluster, TIME goes to
// whichever node the client picks; give the clock a client of the node that
// holds the lock keys, or one whose nodes' clocks agree.
//
// The clock keeps an interval that holds the server's time for sure, and
// Now is its middle. A TIME sample bounds the server's time by its round
// trip (the server read its clock somewhere between send and reply); a
// measurement is the intersection of a few samples. Between measurements
// the interval widens at the drift rate the clock assumes (100 ppm: the
// local monotonic clock and the server's clock each tick within 50 ppm of
// true time, a quartz oscillator's usual tolerance). Each new measurement
// is intersected with the aged interval, so a measurement whose replies
// were all slow narrows nothing and moves Now no further than the evidence
// allows: one slow re-measure never puts the clock behind its best
// measurement. A measurement that does not meet the aged interval at all
// means the server's clock was stepped (or slewed faster than assumed): the
// clock then takes the new measurement alone and counts a step (Steps).
//
// Uncertainty is half the interval's width, so it bounds how far Now may
// be from the server's time, and grows with the age of the measurement.
// Two Lockers on ServerClocks of the same server agree to within the sum of
// their Uncertainty, and a Locker accounts for its own: a lease it holds
// ends, for it, that much before the end it states, and a foreign lease is
// taken over only that much after its end plus the skew margin.
//
// Waits for an instant of the clock (a lease's end) follow it: when a
// measurement moves Now, they are re-armed at once.
type ServerClock struct {
	client redis.UniversalClient

	mu    sync.Mutex
	known serverTime // where the server's time is, for sure
	steps int64      // measurements that did not meet known: the server's clock stepped

	waits clockWaits // re-armed after every measurement that moves Now

	stop    context.CancelFunc // ends the background refresh, and a measurement in flight
	stopped context.Context
}

// serverClockSamples is how many TIME round trips one measurement makes;
// their intervals are intersected.
const serverClockSamples = 5

// clockDrift bounds how fast the local monotonic clock and the server's
// clock drift apart, in seconds per second: 100 ppm, each within 50 ppm of
// true time. It is the rate at which a ServerClock's Uncertainty grows
// between measurements, and the rate at which a Locker expects the
// Uncertainty of its clock (any Clock that reports one) to grow over a
// lease it holds.
const clockDrift = 100e-6

// drift is how far two clocks that tick within clockDrift of each other
// move apart in elapsed.
func drift(elapsed time.Duration) time.Duration {
	return time.Duration(float64(elapsed) * clockDrift)
}

// NewServerClock measures the offset between the local clock and the
// server's TIME through client, and re-measures it every refresh (which
// must be positive) until Close.
func NewServerClock(ctx context.Context, client redis.UniversalClient, refresh time.Duration) (*ServerClock, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidArgument)
	}
	if refresh <= 0 {
		return nil, fmt.Errorf("%w: refresh interval %v is not positive", ErrInvalidArgument, refresh)
	}
	c := &ServerClock{client: client}
	first, err := c.sample(ctx)
	if err != nil {
		return nil, err
	}
	c.known = first
	c.stopped, c.stop = context.WithCancel(context.Background())
	go c.refreshEvery(refresh)
	return c, nil
}

// Now returns the middle of the interval that holds the server's time,
// moved on by the local monotonic clock since the last measurement, so a
// step of the local wall clock (NTP, a VM resumed) does not move it.
func (c *ServerClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.known.middle().Add(time.Since(c.known.localAt))
}

// Offset returns how far the server's clock was ahead of the local wall
// clock (negative when behind) at the last measurement.
func (c *ServerClock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.known.middle().Sub(c.known.localAt.Round(0))
}

// Uncertainty bounds how far Now may be from the server's time: half the
// width of the interval the measurements so far agree on, widened since
// the last one at the assumed drift rate (100 ppm). It holds as long as the
// server's clock is not stepped; a step is detected at the next
// measurement (Steps), and Uncertainty then starts from that measurement.
func (c *ServerClock) Uncertainty() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.known.halfWidth() + drift(time.Since(c.known.localAt))
}

// Steps returns how many measurements found the server's time outside the
// interval the clock held for sure, and replaced it: the server's clock
// was stepped, or drifted faster than the clock assumes. Each moved Now by
// more than the Uncertainty of the moment before.
func (c *ServerClock) Steps() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.steps
}

// Close stops the background refresh and returns at once: a measurement in
// flight is cancelled, and its goroutine ends when that round trip does
// (go-redis aborts a blocked read on cancellation only with
// ContextTimeoutEnabled). Now keeps working on the last measurement. Close
// is safe to call more than once, concurrently.
func (c *ServerClock) Close() error {
	c.stop()
	return nil
}

func (c *ServerClock) refreshEvery(interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-c.stopped.Done():
			return
		case <-ticker.C:
			ctx, cancel := context.WithTimeout(c.stopped, interval)
			_ = c.measure(ctx) // on failure the last interval stands, ageing
			cancel()
		}
	}
}

// measure samples the server's time and narrows what the clock knows by it,
// or replaces it after a step; then it re-arms the waits on the clock.
func (c *ServerClock) measure(ctx context.Context) error {
	measured, err := c.sample(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	aged := c.known.at(measured.localAt)
	if both, ok := aged.intersect(measured); ok {
		c.known = both
	} else {
		c.known = measured
		c.steps++
	}
	c.mu.Unlock()
	c.waits.recheck()
	return nil
}

// sample makes serverClockSamples TIME round trips and returns the
// intersection of their intervals, or the last sample's alone if they do
// not meet (the server's clock stepped during the measurement).
func (c *ServerClock) sample(ctx context.Context) (serverTime, error) {
	var measured serverTime
	for i := range serverClockSamples {
		sent := time.Now()
		server, err := c.client.Time(ctx).Result()
		if err != nil {
			return serverTime{}, fmt.Errorf("setnxlock: server clock: TIME: %w", err)
		}
		received := time.Now()
		// The server read its clock between sent and received, and TIME
		// truncates it to the microsecond: at received it read at least
		// server and at most server plus the round trip and a microsecond.
		one := serverTime{localAt: received, earliest: server, latest: server.Add(received.Sub(sent) + time.Microsecond)}
		if i == 0 {
			measured = one
			continue
		}
		if both, ok := measured.at(received).intersect(one); ok {
			measured = both
		} else {
			measured = one
		}
	}
	return measured, nil
}

// serverTime is what is known for sure of the server's time at one local
// instant: it lies between earliest and latest.
type serverTime struct {
	localAt  time.Time // with its monotonic reading
	earliest time.Time
	latest   time.Time
}

func (s serverTime) middle() time.Time        { return s.earliest.Add(s.latest.Sub(s.earliest) / 2) }
func (s serverTime) halfWidth() time.Duration { return s.latest.Sub(s.earliest) / 2 }

// at moves what is known to the later local instant localAt: the server's
// time has moved on by the elapsed local time, give or take the drift.
func (s serverTime) at(localAt time.Time) serverTime {
	elapsed := localAt.Sub(s.localAt)
	return serverTime{
		localAt:  localAt,
		earliest: s.earliest.Add(elapsed - drift(elapsed)),
		latest:   s.latest.Add(elapsed + drift(elapsed)),
	}
}

// intersect returns what s and o, known at the same local instant, both
// say; ok is false when they contradict each other.
func (s serverTime) intersect(o serverTime) (both serverTime, ok bool) {
	both = serverTime{localAt: o.localAt, earliest: s.earliest, latest: s.latest}
	if o.earliest.After(both.earliest) {
		both.earliest = o.earliest
	}
	if o.latest.Before(both.latest) {
		both.latest = o.latest
	}
	return both, !both.earliest.After(both.latest)
}

// waitUntil fills the returned channel once the clock reaches instant,
// re-armed whenever a measurement moves the clock; a wait whose abandon
// channel is closed is dropped at its instant or at the next measurement.
func (c *ServerClock) waitUntil(instant time.Time, abandon <-chan struct{}) <-chan time.Time {
	return c.waits.add(c, instant, abandon)
}
