package setnxlock

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// noLockGoroutineLeft fails the test if a goroutine of a Lock (its watch or
// its Context) is still running once the test's locks are over. TestMain's
// goleak check covers the whole package at the end; this one names the
// test that leaked.
func noLockGoroutineLeft(t *testing.T) {
	t.Helper()
	ours := func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "setnxlock.(*Lock)")
	}
	require.Eventually(t, func() bool { return !ours() }, 5*time.Second, time.Millisecond, "a Lock goroutine outlived its lock")
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool { return isClosed(ch) }

// eventually waits a little real time for the lock's goroutine to act on a
// clock move.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, time.Millisecond, what)
}

func TestAutoRefreshKeepsTheLeaseWhileOthersAreRefused(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		lock, err := b.locker(t, WithTTL(9*time.Second), WithAutoRefresh()).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		other := b.locker(t)

		for range 10 { // 30s of manual time, more than three leases
			b.clock.Advance(3 * time.Second)
			want := b.clock.Now().Add(9 * time.Second)
			eventually(t, "renewed every TTL/3", func() bool { return lock.ExpiresAt().Equal(want) })
			_, err := other.TryAcquire(ctx, "lock.k")
			require.ErrorIs(t, err, ErrNotAcquired)
		}
		assert.False(t, closed(lock.Done()))
		require.NoError(t, lock.Release(ctx))
		assert.True(t, closed(lock.Done()))
		assert.NoError(t, lock.Err())
	})
}

// The end-to-end check in real time: a 300ms lease renewed for two
// seconds, with another client refused all along.
func TestAutoRefreshHoldsAShortLeaseInRealTime(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		real := WithClock(systemClock{})
		lock, err := b.locker(t, real, WithTTL(300*time.Millisecond), WithAutoRefresh()).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		other := b.locker(t, real)

		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			_, err := other.TryAcquire(ctx, "lock.k")
			require.ErrorIs(t, err, ErrNotAcquired)
			require.False(t, closed(lock.Done()), "the lease was lost: %v", lock.Err())
			time.Sleep(20 * time.Millisecond)
		}
		require.NoError(t, lock.Release(ctx))
	})
}

// H8: a key overwritten behind the holder's back is noticed by the next
// renewal: Done closes, Err and the lock's context report ErrNotHeld, and
// the foreign value is left alone.
func TestAKeyOverwrittenBehindTheHoldersBackIsLost(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		lock, err := b.locker(t, WithTTL(9*time.Second), WithAutoRefresh()).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		work := lock.Context(ctx)

		foreign := strconv.FormatInt(b.start.Add(time.Hour).UnixMilli(), 10)
		b.set(t, "lock.k", foreign)
		b.clock.Advance(3 * time.Second)
		eventually(t, "the refused renewal ends the lock", func() bool { return closed(lock.Done()) })
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
		await.Recv(t, work.Done(), "the lock's context ending after the loss")
		require.ErrorIs(t, context.Cause(work), ErrNotHeld)
		assert.Equal(t, foreign, b.value(t, "lock.k"))
		require.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
	})
}

// Without auto-refresh, Done closes when the lease runs out by the clock.
func TestDoneClosesWhenTheLeaseRunsOut(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		lock, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		done := lock.Done()

		b.clock.Advance(10*time.Second - time.Millisecond)
		time.Sleep(10 * time.Millisecond) // give a wrong watch the chance to close early
		assert.False(t, closed(done))
		assert.NoError(t, lock.Err())

		b.clock.Advance(time.Millisecond)
		eventually(t, "lost at the end of the lease", func() bool { return closed(done) })
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
	})
}

// A manual Refresh moves the end the watch waits for.
func TestDoneFollowsAManualRefresh(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		lock, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		done := lock.Done()
		require.NoError(t, lock.Refresh(ctx, time.Minute))

		b.clock.Advance(30 * time.Second)
		time.Sleep(10 * time.Millisecond)
		assert.False(t, closed(done), "the watch must follow the refreshed lease")
		require.NoError(t, lock.Release(ctx))
		assert.True(t, closed(done))
	})
}

func TestReleaseEndsTheContextWithoutALoss(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		lock, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		work := lock.Context(ctx)
		require.NoError(t, work.Err())

		require.NoError(t, lock.Release(ctx))
		await.Recv(t, work.Done(), "the lock's context ending after Release")
		assert.NoError(t, lock.Err())
		assert.NotErrorIs(t, context.Cause(work), ErrNotHeld)
	})
}

// Renewals that fail on the network are retried; one that gets through in
// time keeps the lock. The test waits for each attempt before it moves the
// clock again: a goroutine scheduled late must not turn the second failing
// retry into a success (that is how this test flaked under CI load).
func TestAFailedRenewalIsRetried(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		client := b.client(t)
		var failing atomic.Bool
		var attempts atomic.Int32
		failing.Store(true)
		hookCommand(client, "exec", func(send func() error) error {
			if failing.Load() {
				attempts.Add(1)
				return errLostReply{} // never reaches the server
			}
			return send()
		})
		lock, err := b.lockerOn(t, client, WithTTL(8*time.Second), WithRefreshInterval(4*time.Second)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		b.clock.Advance(4 * time.Second)
		eventually(t, "the renewal is attempted", func() bool { return attempts.Load() == 1 })
		b.clock.Advance(time.Second)
		eventually(t, "retried a quarter interval later", func() bool { return attempts.Load() == 2 })
		require.False(t, closed(lock.Done()))
		failing.Store(false)
		b.clock.Advance(time.Second) // the next retry gets through
		want := b.clock.Now().Add(8 * time.Second)
		eventually(t, "renewed after the failures", func() bool { return lock.ExpiresAt().Equal(want) })
		require.EqualValues(t, 2, attempts.Load())
		require.NoError(t, lock.Release(ctx))
	})
}

// When no renewal gets through, the lock is lost once the lease runs out by
// the Locker's clock, not before.
func TestTheLeaseRunsOutWhenRenewalsKeepFailing(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		client := b.client(t)
		var attempts atomic.Int32
		hookCommand(client, "exec", func(func() error) error {
			attempts.Add(1)
			return errors.New("network down")
		})
		lock, err := b.lockerOn(t, client, WithTTL(8*time.Second), WithRefreshInterval(4*time.Second)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		ends := lock.ExpiresAt()
		// The renewal at 4s, then a retry every quarter interval.
		for i, left := range []time.Duration{4 * time.Second, 3 * time.Second, 2 * time.Second, time.Second} {
			b.clock.Set(ends.Add(-left))
			eventually(t, "renewal attempt "+strconv.Itoa(i+1), func() bool { return int(attempts.Load()) == i+1 })
		}
		b.clock.Set(ends.Add(-time.Millisecond))
		time.Sleep(10 * time.Millisecond)
		require.False(t, closed(lock.Done()), "lost before the lease ran out")
		b.clock.Advance(time.Millisecond)
		eventually(t, "lost when the lease ran out", func() bool { return closed(lock.Done()) })
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
	})
}

func TestAutoRefreshNeedsAnIntervalShorterThanTheTTL(t *testing.T) {
	b := newBackend(t, "miniredis", startMiniredis(t))
	for _, opts := range [][]Option{
		{WithTTL(time.Second), WithRefreshInterval(time.Second)},
		{WithTTL(time.Second), WithRefreshInterval(2 * time.Second)},
		{WithRefreshInterval(0)},
		{WithRefreshInterval(-time.Second)},
	} {
		_, err := New(b.client(t), opts...)
		require.ErrorIs(t, err, ErrInvalidArgument)
	}
}
