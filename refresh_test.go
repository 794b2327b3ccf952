package setnxlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRefreshMovesTheLeaseForward(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		lock, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		token := tokenOf(b.value(t, "lock.k"))

		b.clock.Advance(8 * time.Second)
		require.NoError(t, lock.Refresh(ctx, 30*time.Second))
		assert.Equal(t, b.start.Add(38*time.Second), lock.ExpiresAt())
		stored := b.value(t, "lock.k")
		assert.Equal(t, strconv.FormatInt(b.start.Add(38*time.Second).UnixMilli(), 10)+":"+token+"|"+DefaultIdentity(), stored, "the renewal carries the token and the identity")

		b.clock.Advance(29 * time.Second) // long past the first lease, inside the new one
		_, err = b.locker(t).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, lock.Release(ctx))
	})
}

// H3 for Refresh: once our lease is over, or the key is someone else's,
// Refresh reports ErrNotHeld and writes nothing.
func TestRefreshWritesNothingWhenTheLockIsNotOurs(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		sent := record(client)
		lock, err := b.lockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		foreign := strconv.FormatInt(b.start.Add(time.Hour).UnixMilli(), 10)
		b.set(t, "lock.k", foreign)
		sent.reset()
		require.ErrorIs(t, lock.Refresh(ctx, time.Minute), ErrNotHeld)
		assert.Equal(t, foreign, b.value(t, "lock.k"))
		assert.NotContains(t, sent.names(), "SET ", "nothing written")

		b.clock.Advance(10 * time.Second)
		sent.reset()
		require.ErrorIs(t, lock.Refresh(ctx, time.Minute), ErrNotHeld, "the lease is over")
		assert.Empty(t, sent.names(), "an expired lease is refused without a round trip")
		assert.Equal(t, foreign, b.value(t, "lock.k"))
	})
}

func TestRefreshRefusesBadInputAndReleasedLocks(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		sent := record(client)
		lock, err := b.lockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		before := b.value(t, "lock.k")
		sent.reset()
		cancelled, cancel := context.WithCancel(ctx)
		cancel()

		require.ErrorIs(t, lock.Refresh(ctx, 0), ErrInvalidArgument)
		require.ErrorIs(t, lock.Refresh(ctx, -time.Second), ErrInvalidArgument)
		require.ErrorIs(t, lock.Refresh(cancelled, time.Second), context.Canceled)
		assert.Empty(t, sent.names())
		assert.Equal(t, before, b.value(t, "lock.k"))

		require.NoError(t, lock.Release(ctx))
		require.ErrorIs(t, lock.Refresh(ctx, time.Second), ErrNotHeld)
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// A refresh whose reply was lost may or may not have moved the lease.
// ExpiresAt keeps the earlier, safe end; the lock still recognises its own
// newer value and can refresh or release it.
func TestALostRefreshReplyKeepsTheSafeExpiry(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		lock, err := b.lockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		loseReply(client, "exec")

		require.Error(t, lock.Refresh(ctx, time.Minute))
		assert.Equal(t, b.start.Add(10*time.Second), lock.ExpiresAt())
		assert.True(t, strings.HasPrefix(b.value(t, "lock.k"), strconv.FormatInt(b.start.Add(time.Minute).UnixMilli(), 10)), "the refresh was applied")

		require.NoError(t, lock.Refresh(ctx, time.Minute))
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// H6: every lease carries a Redis expiry a grace period past its end, set
// after SETNX, put back after the takeover's GETSET (which clears it) and
// moved by Refresh. It is relative, so a client clock far off the server's
// changes nothing.
func TestEveryLeaseCarriesARelativeSafetyNet(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		farAhead := NewManualClock(time.Now().Add(365 * 24 * time.Hour))
		pttl := func() time.Duration { return b.raw.PTTL(ctx, "lock.k").Val() }

		lock, err := b.locker(t, WithClock(farAhead), WithExpiryGrace(5*time.Second)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		assert.InDelta(t, 15*time.Second, pttl(), float64(time.Second), "SETNX, then PEXPIRE lease + grace")

		require.NoError(t, lock.Refresh(ctx, time.Minute))
		assert.InDelta(t, 65*time.Second, pttl(), float64(time.Second), "Refresh moves the net")

		require.NoError(t, b.raw.Persist(ctx, "lock.k").Err()) // as a classic client's key would be
		farAhead.Advance(time.Minute)
		_, err = b.locker(t, WithClock(farAhead)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		assert.InDelta(t, 20*time.Second, pttl(), float64(time.Second), "the takeover puts the net back; default grace = the lease")
	})
}

// H6 end to end: a key whose holder crashed and that nobody takes over is
// deleted by Redis once the grace period is over, never before its lease.
func TestAnAbandonedKeyVanishesAfterItsGrace(t *testing.T) {
	m := startMiniredisServer(t)
	b := newBackend(t, "miniredis", m.Addr())
	_, err := b.locker(t, WithTTL(10*time.Second), WithExpiryGrace(3*time.Second)).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)

	m.FastForward(13*time.Second - time.Millisecond)
	assert.NotEqual(t, "<missing>", b.value(t, "lock.k"), "not before lease + grace")
	m.FastForward(time.Millisecond)
	assert.Equal(t, "<missing>", b.value(t, "lock.k"))
}
