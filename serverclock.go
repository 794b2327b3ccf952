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
// the offset to the server is measured when the clock is made and again
// every refresh interval in the background until Close.
type ServerClock struct {
	client redis.UniversalClient

	mu          sync.Mutex
	offset      time.Duration // server time minus local time
	uncertainty time.Duration // half the round trip of the sample the offset came from

	stop chan struct{}
	done chan struct{}
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
	c := &ServerClock{client: client, stop: make(chan struct{}), done: make(chan struct{})}
	if err := c.measure(ctx); err != nil {
		return nil, err
	}
	go c.refreshEvery(refresh)
	return c, nil
}

// Now returns the local time corrected by the last measured offset.
func (c *ServerClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Offset returns how far the server's clock is ahead of the local one
// (negative when behind), as last measured.
func (c *ServerClock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// Uncertainty bounds the error of Offset: half the round trip of the TIME
// sample it came from.
func (c *ServerClock) Uncertainty() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.uncertainty
}

// Close stops the background refresh. Now keeps working on the last offset.
func (c *ServerClock) Close() error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	return nil
}

func (c *ServerClock) refreshEvery(interval time.Duration) {
	defer close(c.done)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-ticker.C:
			ctx, cancel := context.WithTimeout(context.Background(), interval)
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
	var offset time.Duration
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
			offset = server.Sub(sent.Add(roundTrip / 2))
		}
	}
	c.mu.Lock()
	c.offset, c.uncertainty = offset, best/2
	c.mu.Unlock()
	return nil
}
