package setnxlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// uncertainManualClock is a ManualClock that reports an Uncertainty, as a
// ServerClock does.
type uncertainManualClock struct {
	*ManualClock
	uncertainty time.Duration
}

func (c uncertainManualClock) Uncertainty() time.Duration { return c.uncertainty }

// H4 (issue 28): on a clock that reports its uncertainty, the holder
// believes less and the reader waits more. Our lease ends, for us, the
// uncertainty (and the drift it may gain over the lease) before the end it
// states; a foreign lease is held, for TryAcquire and Status alike, until
// the skew margin plus our uncertainty after that end.
func TestTheHolderBelievesLessAndTheReaderWaitsMore(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		const u = 30 * time.Millisecond
		clock := uncertainManualClock{b.clock, u}
		holder, err := b.locker(t, WithClock(clock)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		stated := b.start.Add(10 * time.Second)
		assert.Equal(t, stated.Add(-u-time.Millisecond), holder.ExpiresAt(), "10s at 100 ppm is 1ms of drift")

		b.clock.Advance(time.Second)
		require.NoError(t, holder.Refresh(ctx, 5*time.Second))
		stated = b.start.Add(6 * time.Second)
		assert.Equal(t, stated.Add(-u-500*time.Microsecond), holder.ExpiresAt(), "5s at 100 ppm is 0.5ms of drift")

		reader := b.locker(t, WithClock(clock), WithSkewMargin(20*time.Millisecond))
		takeable := stated.Add(20*time.Millisecond + u)
		b.clock.Set(takeable.Add(-time.Millisecond))
		status, err := reader.Status(ctx, "lock.k")
		require.NoError(t, err)
		assert.True(t, status.Held, "Status: the lease is held until margin plus uncertainty after its end")
		_, err = reader.TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "taken inside the reader's uncertainty")

		b.clock.Set(takeable)
		status, err = reader.Status(ctx, "lock.k")
		require.NoError(t, err)
		assert.False(t, status.Held)
		lock, err := reader.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
	})
}
