package setnxlock

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Review of the identity work (issue 25 part 3): the values a Locker now
// writes, read by the code of an earlier version that shares the key.

// An operator's ForceRelease from an earlier version of the library (an
// older `setnxlock release` binary, during a rolling upgrade) broke a
// lease this version wrote, "<ms>:<token>|<identity>". The earlier
// version's tokenOf is everything after the first ':', so its trace names
// "<token>|<identity>", not "<token>" (forcetrace.go at abace0e). The
// broken holder's Release must still report ErrNotHeld (ForceRelease's
// contract, status.go), not take the missing key for its own earlier
// release (H5). Fails today: forcedAway looks up the bare token only, so
// Release returns nil.
func TestAnEarlierVersionsForcedReleaseOfAnIdentityValueIsStillReported(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holder, err := b.locker(t, p.opt, WithIdentity("web-1:4242")).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		value := b.value(t, "lock.k")
		require.Equal(t, holder.token+"|web-1:4242", strings.SplitN(value, ":", 2)[1])

		// What forceDelete at abace0e writes for that value: DEL, and the
		// trace of tokenOf(value) = everything after the first ':'.
		_, olderTrace, _ := strings.Cut(value, ":")
		require.NoError(t, b.raw.Del(ctx, "lock.k").Err())
		require.NoError(t, b.raw.ZAdd(ctx, releasedKey("lock.k"), redis.Z{
			Score: float64(holder.ExpiresAt().UnixMilli()), Member: olderTrace,
		}).Err())

		require.ErrorIs(t, holder.Release(ctx), ErrNotHeld, "broken by an earlier version's ForceRelease")
	})
}
