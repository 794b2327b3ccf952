package setnxlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// Status reads a missing key, a live lease, an expired one, every classic
// format and foreign values, and writes nothing.
func TestStatusTellsFreeHeldExpiredAndForeignKeysApart(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t)
		status, err := l.Status(ctx, "lock.k")
		require.NoError(t, err)
		assert.Equal(t, KeyStatus{Key: "lock.k"}, status, "a missing key is free")

		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		status, err = l.Status(ctx, "lock.k")
		require.NoError(t, err)
		assert.True(t, status.Exists && status.Held && !status.Foreign, "our own live lease is held: %+v", status)
		assert.Equal(t, TokenFormat, status.Format)
		assert.True(t, lock.ExpiresAt().Equal(status.ExpiresAt), "the end of the lease: %v, want %v", status.ExpiresAt, lock.ExpiresAt())
		assert.Equal(t, b.value(t, "lock.k"), status.Value)

		b.clock.Set(lock.ExpiresAt())
		status, err = l.Status(ctx, "lock.k")
		require.NoError(t, err)
		assert.True(t, status.Exists && !status.Held, "a lease at its end is no longer held: %+v", status)

		end := b.start.Add(30 * time.Second)
		for _, c := range []struct {
			value  string
			format Format
		}{
			{strconv.FormatInt(end.UnixMilli(), 10), UnixMillis},
			{strconv.FormatInt(end.Unix(), 10), UnixSeconds},
			{strconv.FormatInt(end.Unix(), 10) + ".250", FloatSeconds},
			{strconv.FormatInt(end.UnixMilli(), 10) + ":SOMETOKEN", TokenFormat},
		} {
			b.set(t, "lock.k", c.value)
			status, err := l.Status(ctx, "lock.k")
			require.NoError(t, err)
			assert.Equal(t, c.format, status.Format, "the format of %q", c.value)
			assert.True(t, status.Held, "%q is a live lease", c.value)
			assert.WithinDuration(t, end, status.ExpiresAt, 250*time.Millisecond, "the end %q states", c.value)
		}

		b.set(t, "lock.k", "hello")
		status, err = l.Status(ctx, "lock.k")
		require.NoError(t, err)
		assert.True(t, status.Exists && status.Foreign && !status.Held, "garbage is foreign: %+v", status)
		assert.Equal(t, "hello", b.value(t, "lock.k"), "and left as it was")

		require.NoError(t, b.raw.Del(ctx, "lock.k").Err())
		require.NoError(t, b.raw.RPush(ctx, "lock.k", "a").Err())
		status, err = l.Status(ctx, "lock.k")
		require.NoError(t, err)
		assert.True(t, status.Exists && status.Foreign, "a list is foreign: %+v", status)
		assert.Equal(t, int64(1), b.raw.LLen(ctx, "lock.k").Val(), "and left as it was")

		_, err = l.Status(ctx, "")
		assert.ErrorIs(t, err, ErrInvalidArgument)
	})
}

// Status counts the waiters queued on a key, and the count falls back to
// 0 once they give up.
func TestStatusCountsTheQueuedWaiters(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder := b.locker(t, path)
		warm(t, holder)
		_, err := holder.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		quitCtx, quit := context.WithCancel(await.Context(t))
		gaveUp := make(chan error, 2)
		for range 2 {
			waiter := b.locker(t, path)
			go func() { _, err := waiter.Acquire(quitCtx, "lock.k"); gaveUp <- err }()
		}
		b.queued(t, "lock.k", 2)
		status, err := holder.Status(ctx, "lock.k")
		require.NoError(t, err)
		assert.Equal(t, int64(2), status.Waiters)

		quit()
		for range 2 {
			require.ErrorIs(t, await.Recv(t, gaveUp, "a waiter giving up"), ErrNotAcquired)
		}
		status, err = holder.Status(ctx, "lock.k")
		require.NoError(t, err)
		assert.Zero(t, status.Waiters, "waiters that gave up left the queue")
	})
}

// ForceRelease deletes a live lease of someone else's, says what it
// deleted, keeps the fencing counter, and leaves foreign values alone.
func TestForceReleaseDeletesWhoeverHoldsTheKeyAndSaysWhat(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder := b.locker(t, WithFencing())
		lock, err := holder.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		held := b.value(t, "lock.k")

		operator := b.locker(t)
		deleted, err := operator.ForceRelease(ctx, "lock.k")
		require.NoError(t, err)
		assert.Equal(t, held, deleted.Value, "it says what it deleted")
		assert.True(t, deleted.Held, "a live lease")
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
		assert.Equal(t, "1", b.value(t, FenceKey("lock.k")), "the fencing counter is kept")
		assert.ErrorIs(t, lock.Release(ctx), ErrNotHeld, "the holder learns it lost the lock")

		deleted, err = operator.ForceRelease(ctx, "lock.k")
		require.NoError(t, err)
		assert.False(t, deleted.Exists, "nothing left to delete")

		b.set(t, "lock.k", "hello")
		_, err = operator.ForceRelease(ctx, "lock.k")
		assert.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, "hello", b.value(t, "lock.k"), "a foreign value is left alone")
	})
}

// A value that changes between ForceRelease's read and its delete is read
// again: what is reported is what was deleted.
func TestForceReleaseReportsTheValueItActuallyDeleted(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		operatorClient := b.client(t)
		operator := b.lockerOn(t, operatorClient)
		first := strconv.FormatInt(b.start.Add(time.Minute).UnixMilli(), 10)
		second := strconv.FormatInt(b.start.Add(2*time.Minute).UnixMilli(), 10)
		b.set(t, "lock.k", first)
		overwritten := false
		hookCommand(operatorClient, "watch", func(send func() error) error {
			if !overwritten {
				overwritten = true
				b.set(t, "lock.k", second)
			}
			return send()
		})
		deleted, err := operator.ForceRelease(context.Background(), "lock.k")
		require.NoError(t, err)
		assert.True(t, overwritten, "the key changed after the read")
		assert.Equal(t, second, deleted.Value)
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}
