package setnxlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// H5 without a marker on every release: the holder whose lease an
// operator's ForceRelease broke reports ErrNotHeld, by the trace of its
// token, whether the key is then missing or a successor's; the successor
// is left alone (H3).
func TestAForcedReleaseLeavesATraceTheBrokenHolderReads(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		for _, successor := range []bool{false, true} {
			holder, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
			require.NoError(t, err)
			_, err = b.locker(t, p.opt).ForceRelease(ctx, "lock.k")
			require.NoError(t, err)
			var next *Lock
			if successor {
				next, err = b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
			}
			err = holder.Release(ctx)
			require.ErrorIs(t, err, ErrNotHeld, "broken by an operator, with a successor: %v", successor)
			require.ErrorIs(t, holder.Err(), ErrNotHeld)
			if successor {
				assert.Equal(t, next.value, b.value(t, "lock.k"), "the successor left alone")
				require.NoError(t, next.Release(ctx))
			}
		}
	})
}

// The trace lasts for the rest of the broken lease, as every clock within
// the skew margin sees it, and no longer; a trace already there for a
// longer lease is not cut short.
func TestTheTraceOfAForcedReleaseLastsTheRestOfTheLease(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		long, err := b.locker(t, WithTTL(time.Minute), WithSkewMargin(0)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		operator := b.locker(t, WithSkewMargin(0))
		_, err = operator.ForceRelease(ctx, "lock.k")
		require.NoError(t, err)
		assert.InDelta(t, time.Minute.Milliseconds(), b.raw.PTTL(ctx, releasedKey("lock.k")).Val().Milliseconds(), 1000)

		short, err := b.locker(t, WithTTL(time.Second), WithSkewMargin(0)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		_, err = operator.ForceRelease(ctx, "lock.k")
		require.NoError(t, err)
		assert.InDelta(t, time.Minute.Milliseconds(), b.raw.PTTL(ctx, releasedKey("lock.k")).Val().Milliseconds(), 1000, "not cut short")
		require.ErrorIs(t, long.Release(ctx), ErrNotHeld)
		require.ErrorIs(t, short.Release(ctx), ErrNotHeld)
	})
}

// The common path pays only for itself: a release of a token value writes
// no marker, on any path.
func TestAReleaseOfATokenValueWritesNoMarker(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		lock, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
		assert.Zero(t, b.raw.Exists(ctx, releasedKey("lock.k")).Val(), "no release marker")
	})
}
