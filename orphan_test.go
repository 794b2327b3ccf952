package setnxlock

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// waits returns the instants the clock's pending waits are due at, the
// abandoned ones left out: what the Lock's goroutines wait for.
func waits(c *ManualClock) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var due []time.Time
	for _, w := range c.waiters {
		if !isClosed(w.abandon) {
			due = append(due, w.at)
		}
	}
	return due
}

// waitsOnlyFor reports whether the clock has pending waits, all of them
// due at instant.
func waitsOnlyFor(c *ManualClock, instant time.Time) bool {
	due := waits(c)
	for _, at := range due {
		if !at.Equal(instant) {
			return false
		}
	}
	return len(due) > 0
}

// renewing reports whether a Lock's keeper is in a renewal: it has decided
// to renew, and waits for the Lock's turn or talks to Redis.
func renewing() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "setnxlock.(*Lock).renew(")
}

// An orphaned lock is not renewed: at the instant its first renewal was
// due, its keeper goes back to waiting for the lease's end. The key stays
// ours until then, and is left to expire; Done and Err report the end by
// the Locker's clock.
func TestAnOrphanedLockKeepsItsLeaseUntilItsEnd(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		defer noLockGoroutineLeft(t)
		lock, err := b.locker(t, p.opt, WithTTL(9*time.Second), WithAutoRefresh()).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		ends, value := lock.ExpiresAt(), b.value(t, "lock.k")
		lock.Orphan()

		b.clock.Advance(3 * time.Second) // the first renewal was due now
		eventually(t, "the keeper waiting for the lease's end instead of renewing", func() bool {
			return !renewing() && waitsOnlyFor(b.clock, ends)
		})
		assert.Equal(t, ends, lock.ExpiresAt())
		assert.Equal(t, value, b.value(t, "lock.k"), "an orphaned lease is not renewed")
		_, err = b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "the key stays ours until the lease's end")
		assert.False(t, closed(lock.Done()))
		assert.NoError(t, lock.Err())

		b.clock.Set(ends)
		eventually(t, "Done closing at the lease's end", func() bool { return closed(lock.Done()) })
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
		assert.Equal(t, value, b.value(t, "lock.k"), "the lease is left to expire, not deleted")
	})
}

// Release still gives an orphaned lock up, before its lease ends.
func TestReleaseGivesAnOrphanedLockUpEarly(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		defer noLockGoroutineLeft(t)
		lock, err := b.locker(t, p.opt, WithAutoRefresh()).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		lock.Orphan()

		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
		assert.True(t, closed(lock.Done()))
		assert.NoError(t, lock.Err())
		_, err = b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "the key is free once released")
		lock.Orphan() // a released lock: nothing happens
		var none *Lock
		none.Orphan()
	})
}

// The CLI's --min-hold: Orphan, then Refresh to set when the lease ends. A
// renewal the keeper decided before Orphan, still waiting for the Lock's
// turn behind that Refresh, writes nothing: the lease ends where the
// Refresh put it, and the key states that end.
func TestARenewalDecidedBeforeOrphanWritesNothing(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		defer noLockGoroutineLeft(t)
		client := b.client(t)
		lock, err := b.lockerOn(t, client, p.opt, WithTTL(9*time.Second), WithAutoRefresh()).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		atWatch := gateBefore(t, client, "watch", 1)
		refreshed := make(chan error, 1)
		go func() { refreshed <- lock.Refresh(ctx, 5*time.Second) }() // holds the Lock's turn, stopped at its WATCH
		atWatch.wait(t)
		b.clock.Advance(3 * time.Second) // the keeper's renewal is due
		eventually(t, "the keeper's renewal waiting for the Lock's turn", renewing)
		lock.Orphan()
		atWatch.pass()
		require.NoError(t, await.Recv(t, refreshed, "the Refresh after Orphan"))

		setEnd := b.start.Add(5 * time.Second)
		eventually(t, "the keeper waiting for the end the Refresh set, not renewing", func() bool {
			return !renewing() && waitsOnlyFor(b.clock, setEnd)
		})
		assert.Equal(t, setEnd, lock.ExpiresAt())
		stated, err := parseExpiry(b.value(t, "lock.k"))
		require.NoError(t, err)
		assert.True(t, stated.Equal(setEnd), "the key states %v, not the end the Refresh set", stated)

		b.clock.Set(setEnd)
		eventually(t, "Done closing at the end the Refresh set", func() bool { return closed(lock.Done()) })
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
	})
}
