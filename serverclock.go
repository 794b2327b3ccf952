package setnxlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerClock is a Clock that follows the Redis server's TIME instead of
// the local clock (H4). Lockers on different machines that each use a
// ServerClock on the same server agree on the time to within the sum of
// their Uncertainty, plus the drift of their local clocks between
// refreshes, however far apart their own clocks are. Now is a local read;
// the server's time is sampled when the clock is made and again every
// refresh interval in the background until Close. On Redis Cluster, TIME
// goes to whichever node the client picks; give the clock a client of the
// node that holds the lock keys, or one whose nodes' clocks agree.
type ServerClock struct {
	client redis.UniversalClient

	mu          sync.Mutex
	serverAt    time.Time     // the server's time at the best sample
	localAt     time.Time     // the local time then, with its monotonic reading
	uncertainty time.Duration // half the round trip of the sample the offset came from

	stop    context.CancelFunc // ends the background refresh, and a measurement in flight
	stopped context.Context
}

// serverClockSamples is how many TIME round trips one measurement makes;
// the one with the shortest round trip wins.
const serverClockSamples = 5

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
	if err := c.measure(ctx); err != nil {
		return nil, err
	}
	c.stopped, c.stop = context.WithCancel(context.Background())
	go c.refreshEvery(refresh)
	return c, nil
}

// Now returns the server's time at the last measurement plus the time
// elapsed since on the local monotonic clock, so a step of the local wall
// clock (NTP, a VM resumed) between measurements does not move it.
func (c *ServerClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.serverAt.Add(time.Since(c.localAt))
}

// Offset returns how far the server's clock was ahead of the local wall
// clock (negative when behind) at the last measurement.
func (c *ServerClock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.serverAt.Sub(c.localAt.Round(0))
}

// Uncertainty bounds the error of Offset: half the round trip of the TIME
// sample it came from.
func (c *ServerClock) Uncertainty() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.uncertainty
}

// Close stops the background refresh and returns at once: a measurement in
// flight is cancelled, and its goroutine ends when that round trip does
// (go-redis aborts a blocked read on cancellation only with
// ContextTimeoutEnabled). Now keeps working on the last offset. Close is
// safe to call more than once, concurrently.
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
			_ = c.measure(ctx) // on failure the last offset stands
			cancel()
		}
	}
}

// measure samples TIME a few times and keeps the offset of the sample with
// the shortest round trip, assuming the server read its clock half way
// through it.
func (c *ServerClock) measure(ctx context.Context) error {
	best := time.Duration(-1)
	var serverAt, localAt time.Time
	for range serverClockSamples {
		sent := time.Now()
		server, err := c.client.Time(ctx).Result()
		if err != nil {
			return fmt.Errorf("setnxlock: server clock: TIME: %w", err)
		}
		received := time.Now()
		roundTrip := received.Sub(sent)
		if best < 0 || roundTrip < best {
			best = roundTrip
			serverAt, localAt = server, sent.Add(roundTrip/2)
		}
	}
	c.mu.Lock()
	c.serverAt, c.localAt, c.uncertainty = serverAt, localAt, best/2
	c.mu.Unlock()
	return nil
}
