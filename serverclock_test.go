package setnxlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/redistest"
)

// H4: a ServerClock reads the server's time, however far the local clock
// is from it. miniredis lets the test put the server's TIME an hour ahead.
func TestServerClockFollowsTheServerNotTheLocalClock(t *testing.T) {
	m := startMiniredisServer(t)
	serverNow := time.Now().Add(time.Hour)
	m.SetTime(serverNow)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })

	clock, err := NewServerClock(ctx, client, time.Hour)
	require.NoError(t, err)
	defer clock.Close()
	assert.InDelta(t, time.Hour, clock.Offset(), float64(time.Second))
	assert.WithinDuration(t, serverNow, clock.Now(), time.Second)
	assert.Less(t, clock.Uncertainty(), 100*time.Millisecond)
}

func TestServerClockAgreesWithALocalRedisServer(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { _ = client.Close() })
	clock, err := NewServerClock(ctx, client, time.Hour)
	require.NoError(t, err)
	defer clock.Close()
	assert.InDelta(t, 0, clock.Offset(), float64(50*time.Millisecond), "same machine, same clock")
	assert.Less(t, clock.Uncertainty(), 50*time.Millisecond)
}

func TestServerClockRefreshesItsOffset(t *testing.T) {
	m := startMiniredisServer(t)
	m.SetTime(time.Now())
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	clock, err := NewServerClock(ctx, client, 5*time.Millisecond)
	require.NoError(t, err)

	m.SetTime(time.Now().Add(-time.Hour)) // the server's clock is stepped back
	require.Eventually(t, func() bool { return clock.Offset() < -59*time.Minute }, 5*time.Second, time.Millisecond)
	require.NoError(t, clock.Close())
	require.NoError(t, clock.Close(), "Close twice is harmless")
	assert.WithinDuration(t, time.Now().Add(-time.Hour), clock.Now(), 2*time.Second)
}

func TestServerClockRefusesBadInput(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: startMiniredis(t)})
	t.Cleanup(func() { _ = client.Close() })
	_, err := NewServerClock(ctx, nil, time.Second)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = NewServerClock(ctx, client, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = NewServerClock(cancelled, client, time.Second)
	require.ErrorIs(t, err, context.Canceled)
}

// H4: with a skew margin, a client whose clock runs ahead of the holder's
// by less than the margin still waits for the holder's lease to end by the
// holder's own clock. Without it, the same client takes over early.
func TestSkewMarginProtectsALeaseFromClocksThatRunAhead(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		ahead := NewManualClock(b.clock.Now().Add(1500 * time.Millisecond))

		b.clock.Set(holder.ExpiresAt().Add(-time.Millisecond)) // the holder's lease is live
		ahead.Set(b.clock.Now().Add(1500 * time.Millisecond))
		_, err = b.locker(t, WithClock(ahead), WithSkewMargin(2*time.Second)).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "inside the margin")

		careless, err := b.locker(t, WithClock(ahead)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "without a margin the skewed clock ends the lease early")
		require.NoError(t, careless.Release(ctx))
	})
}

func TestSkewMarginDelaysTakeoverByExactlyTheMargin(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		crashed, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		l := b.locker(t, WithSkewMargin(2*time.Second))

		b.clock.Set(crashed.ExpiresAt().Add(2*time.Second - time.Millisecond))
		_, err = l.TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)
		b.clock.Set(crashed.ExpiresAt().Add(2 * time.Second))
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))

		_, err = New(b.client(t), WithSkewMargin(-time.Millisecond))
		require.ErrorIs(t, err, ErrInvalidArgument)
	})
}
