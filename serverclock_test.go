package setnxlock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
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

// slowTime makes the TIME replies client receives arrive latency late once
// slow is set: the server reads its clock at once, the reply is held up on
// the way back, as on a congested link.
func slowTime(client *redis.Client, latency time.Duration) (slow *atomic.Bool) {
	slow = new(atomic.Bool)
	hookCommand(client, "time", func(send func() error) error {
		err := send()
		if slow.Load() {
			time.Sleep(latency) // the fault: the reply is late
		}
		return err
	})
	return slow
}

// L2 (issue 28): one measurement whose TIME replies are all slow used to
// replace a good offset with one up to half its round trip behind. A
// ServerClock intersects each measurement with what it already knew, so
// it stays as close to the server as its best measurement put it, and
// Uncertainty still bounds its error. The server here shares the test's
// clock, so the true offset is zero.
func TestAServerClockDoesNotFallBehindAfterASlowRemeasure(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		slow := slowTime(client, 300*time.Millisecond)
		clock, err := NewServerClock(ctx, client, time.Hour)
		require.NoError(t, err)
		defer clock.Close()
		require.Less(t, clock.Uncertainty(), 50*time.Millisecond, "a fast first measurement")

		slow.Store(true)
		require.NoError(t, clock.measure(ctx))
		assert.Less(t, clock.Uncertainty(), 50*time.Millisecond, "the slow measurement widened what was known")
		assert.InDelta(t, 0, clock.Offset(), float64(50*time.Millisecond), "the slow measurement moved the clock")
		assert.InDelta(t, 0, clock.Offset(), float64(clock.Uncertainty()), "Uncertainty does not bound the offset's error")
		assert.Zero(t, clock.Steps(), "a slow measurement is no step of the server's clock")
	})
}

// Uncertainty bounds the error of a clock measured only through slow
// replies, and grows as the measurement ages.
func TestServerClockUncertaintyBoundsASlowMeasurementAndGrowsWithAge(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		slowTime(client, 300*time.Millisecond).Store(true)
		clock, err := NewServerClock(ctx, client, time.Hour)
		require.NoError(t, err)
		defer clock.Close()
		assert.InDelta(t, 0, clock.Offset(), float64(clock.Uncertainty()), "Uncertainty does not bound the offset's error")
		measured := clock.Uncertainty()
		clock.mu.Lock()
		k := &clock.known // as if measured an hour earlier
		k.localAt, k.earliest, k.latest = k.localAt.Add(-time.Hour), k.earliest.Add(-time.Hour), k.latest.Add(-time.Hour)
		clock.mu.Unlock()
		assert.GreaterOrEqual(t, clock.Uncertainty(), measured+360*time.Millisecond, "an hour at 100 ppm adds 360ms")
	})
}

// H4 with ServerClocks (issue 28): the holder believes less, the reader
// waits more. A holder whose ServerClock was measured only through slow
// replies, or re-measured through them, runs behind the server by up to
// half their round trip; a reader on an accurate ServerClock with the
// README's LAN margin of 20ms must still not take the key while the holder
// believes it holds it.
func TestLockersOnServerClocksNeverOverlap(t *testing.T) {
	for _, tc := range []struct {
		name        string
		slowAtFirst bool // the first measurement is slow too: nothing good to keep
	}{
		{name: "slow re-measure", slowAtFirst: false},
		{name: "slow first measurement", slowAtFirst: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				clockClient := b.client(t)
				slow := slowTime(clockClient, 300*time.Millisecond)
				slow.Store(tc.slowAtFirst)
				holderClock, err := NewServerClock(ctx, clockClient, time.Hour)
				require.NoError(t, err)
				defer holderClock.Close()
				slow.Store(true)
				require.NoError(t, holderClock.measure(ctx))

				readerClock, err := NewServerClock(ctx, b.client(t), time.Hour)
				require.NoError(t, err)
				defer readerClock.Close()

				ttl := 500 * time.Millisecond
				holder, err := New(b.client(t), WithClock(holderClock), WithTTL(ttl))
				require.NoError(t, err)
				defer holder.Close()
				reader, err := New(b.client(t), WithClock(readerClock), WithTTL(ttl), WithSkewMargin(20*time.Millisecond))
				require.NoError(t, err)
				defer reader.Close()

				held, err := holder.TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				taken, err := reader.Acquire(await.Context(t), "lock.k")
				require.NoError(t, err)
				believed := held.ExpiresAt().Sub(holderClock.Now())
				assert.LessOrEqual(t, believed, time.Duration(0),
					"the reader took the key while the holder believed %v of its lease", believed)
				require.NoError(t, taken.Release(ctx))
			})
		})
	}
}
