package setnxlock

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var bareFormats = []Format{UnixMillis, UnixSeconds, FloatSeconds}

// takeableAt is when other clients may take over a lease of this format
// that ends at end: at its end, but a whole-seconds value (UnixSeconds) is
// held through the end of the second it states (heldUntil).
func takeableAt(format Format, end time.Time) time.Time {
	if format == UnixSeconds {
		return end.Add(time.Second)
	}
	return end
}

// Each format writes what its classic writer writes, at the instant of the
// Locker's clock, and the lease ends where the value says.
func TestEachFormatWritesWhatItsClassicWriterWrites(t *testing.T) {
	at := clockStart().Add(123*time.Millisecond + 456*time.Microsecond)
	ttl := 5 * time.Second
	ms := at.UnixMilli() + ttl.Milliseconds()
	for _, tc := range []struct {
		format Format
		want   string
	}{
		{UnixMillis, strconv.FormatInt(ms+1, 10)},                   // Date.now() + timeout + 1
		{UnixSeconds, strconv.FormatInt(at.Unix()+5+1, 10)},         // the SETNX page: now + timeout + 1
		{FloatSeconds, strconv.FormatInt(at.Unix()+5, 10) + ".123"}, // redis-py, at millisecond resolution
		{TokenFormat, strconv.FormatInt(ms, 10) + ":"},              // followed by the token
	} {
		t.Run(tc.format.String(), func(t *testing.T) {
			b := newBackend(t, "miniredis", startMiniredis(t))
			b.clock.Set(at)
			lock, err := b.locker(t, WithTTL(ttl), WithFormat(tc.format)).TryAcquire(ctx, "lock.k")
			require.NoError(t, err)
			stored := b.value(t, "lock.k")
			if tc.format == TokenFormat {
				assert.Equal(t, tc.want, stored[:len(tc.want)])
				assert.Len(t, tokenOf(stored), 26)
			} else {
				assert.Equal(t, tc.want, stored)
			}
			stated, err := parseExpiry(stored)
			require.NoError(t, err)
			assert.True(t, stated.Equal(lock.ExpiresAt()), "ExpiresAt %v, the value says %v", lock.ExpiresAt(), stated)
			assert.Greater(t, lock.ExpiresAt().Sub(at), ttl-time.Millisecond, "rounding shortens a lease by less than 1ms")
		})
	}
}

// Lockers writing different formats share keys: each refuses the others'
// live leases and takes over their expired ones, whatever the format.
func TestLockersOfEveryFormatShareKeys(t *testing.T) {
	formats := append([]Format{TokenFormat}, bareFormats...)
	onEachBackend(t, func(t *testing.T, b *backend) {
		for i, holderFormat := range formats {
			takerFormat := formats[(i+1)%len(formats)]
			holder := b.locker(t, WithFormat(holderFormat))
			taker := b.locker(t, WithFormat(takerFormat))
			key := "lock." + holderFormat.String()

			held, err := holder.TryAcquire(ctx, key)
			require.NoError(t, err)
			_, err = taker.TryAcquire(ctx, key)
			require.ErrorIs(t, err, ErrNotAcquired, "%v refuses a live %v lease", takerFormat, holderFormat)

			b.clock.Set(takeableAt(holderFormat, held.ExpiresAt()))
			taken, err := taker.TryAcquire(ctx, key)
			require.NoError(t, err, "%v takes over an expired %v lease", takerFormat, holderFormat)
			require.ErrorIs(t, held.Release(ctx), ErrNotHeld)
			require.NoError(t, taken.Release(ctx))
			assert.Equal(t, "<missing>", b.value(t, key))
		}
	})
}

// H3 without a token: ownership is the exact value, so a late Release or
// Refresh finds the successor's value and leaves it alone.
func TestBareFormatsReleaseOnlyTheirExactValue(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		for _, format := range bareFormats {
			key := "lock." + format.String()
			late, err := b.locker(t, WithFormat(format)).TryAcquire(ctx, key)
			require.NoError(t, err)
			b.clock.Set(takeableAt(format, late.ExpiresAt()))
			next, err := b.locker(t, WithFormat(format)).TryAcquire(ctx, key)
			require.NoError(t, err)
			successor := b.value(t, key)

			require.ErrorIs(t, late.Refresh(ctx, time.Minute), ErrNotHeld)
			require.ErrorIs(t, late.Release(ctx), ErrNotHeld)
			assert.Equal(t, successor, b.value(t, key), "%v: the successor's value is untouched", format)
			require.NoError(t, next.Release(ctx))
		}
	})
}

// Refresh rewrites a bare value, and the new value is what Release then
// owns; after a refresh whose reply was lost, either value is ours.
func TestBareFormatsRefreshAndReleaseTheirNewValue(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		lock, err := b.lockerOn(t, client, WithFormat(UnixMillis)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		first := b.value(t, "lock.k")

		b.clock.Advance(time.Second)
		require.NoError(t, lock.Refresh(ctx, time.Minute))
		assert.NotEqual(t, first, b.value(t, "lock.k"))
		assert.Equal(t, b.clock.Now().Add(time.Minute+time.Millisecond), lock.ExpiresAt())

		b.clock.Advance(time.Second)
		loseReply(client, "exec")
		require.Error(t, lock.Refresh(ctx, 2*time.Minute))
		require.NoError(t, lock.Release(ctx), "the value the lost refresh wrote is ours too")
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// H5 without a token is not recognised: another client writing in the same
// millisecond with the same TTL writes the very same bare value, and
// claiming it would put two holders in.
func TestBareFormatsNeverClaimAnIdenticalForeignValue(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		for _, format := range bareFormats {
			key := "lock." + format.String()
			holder, err := b.locker(t, WithFormat(format)).TryAcquire(ctx, key)
			require.NoError(t, err)

			_, err = b.locker(t, WithFormat(format)).TryAcquire(ctx, key) // same clock, same TTL: same value
			require.ErrorIs(t, err, ErrNotAcquired, "%v: an identical value is not ours", format)
			require.NoError(t, holder.Release(ctx))
		}
	})
}

// H6 with a format that rounds up: the safety net is counted from the
// lease the value states, so even a 1ms grace never ends it early.
func TestTheSafetyNetCoversTheRoundedUpLease(t *testing.T) {
	mr := startMiniredisServer(t)
	b := newBackend(t, "miniredis", mr.Addr())
	b.clock.Set(b.start.Add(999 * time.Millisecond))
	lock, err := b.locker(t, WithFormat(UnixSeconds), WithTTL(1500*time.Millisecond), WithExpiryGrace(time.Millisecond)).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	assert.Equal(t, b.start.Add(3*time.Second), lock.ExpiresAt())
	leaseLeft := lock.ExpiresAt().Sub(b.clock.Now())
	assert.GreaterOrEqual(t, b.raw.PTTL(ctx, "lock.k").Val(), leaseLeft, "the key outlives the lease it states")
}

func TestFormatNames(t *testing.T) {
	assert.Equal(t, "UnixSeconds", UnixSeconds.String())
	assert.Equal(t, "Format(9)", Format(9).String())
}
