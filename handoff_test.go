package setnxlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scripted is the scripts path, on which Lockers queue and hand over.
var scripted = paths[0].opt

// queued waits until key's queue holds n entries and returns them.
func (b *backend) queued(t *testing.T, key string, n int) []string {
	t.Helper()
	var entries []string
	require.Eventually(t, func() bool {
		entries = b.raw.LRange(ctx, waitersKey(key), 0, -1).Val()
		return len(entries) == n
	}, 5*time.Second, time.Millisecond, "waiters queued on %q", key)
	return entries
}

// acquireInBackground starts Acquire of key and returns where its result
// will arrive.
func acquireInBackground(t *testing.T, l *Locker, key string) <-chan *Lock {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	t.Cleanup(cancel)
	acquired := make(chan *Lock, 1)
	go func() {
		lock, err := l.Acquire(waitCtx, key)
		assert.NoError(t, err)
		acquired <- lock
	}()
	return acquired
}

// A release hands the key to the first queued waiter: the key goes from
// one holder's value straight to the next's, with no DEL in between for a
// third client to barge into, and waiters are served in the order they
// queued.
func TestAReleaseHandsTheKeyToQueuedWaitersInOrder(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holderClient := b.client(t)
		holderLocker := b.lockerOn(t, holderClient, scripted)
		warm(t, holderLocker)
		holder, err := holderLocker.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		first := acquireInBackground(t, b.locker(t, scripted), "lock.k")
		b.queued(t, "lock.k", 1)
		second := acquireInBackground(t, b.locker(t, scripted), "lock.k")
		entries := b.queued(t, "lock.k", 2)

		sent := record(holderClient)
		require.NoError(t, holder.Release(ctx))
		assert.Equal(t, "EVALSHA", sent.names(), "one round trip")
		assert.Zero(t, b.raw.Exists(ctx, "lock.k").Val()-1, "the key never went missing")
		lock := <-first
		require.NotNil(t, lock)
		assert.True(t, strings.HasSuffix(entries[0], ":"+lock.token), "the first to queue is served first")
		assert.Equal(t, lock.value, b.value(t, "lock.k"))
		assert.True(t, b.clock.Now().Add(10*time.Second).Equal(lock.ExpiresAt()), "the lease counts from the handoff")
		_, err = b.locker(t, scripted).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "nobody barges in")

		require.NoError(t, lock.Release(ctx))
		next := <-second
		require.NotNil(t, next)
		assert.Equal(t, next.value, b.value(t, "lock.k"))
		require.NoError(t, next.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "the last release deletes the key")
		assert.Zero(t, b.raw.Exists(ctx, waitersKey("lock.k")).Val(), "and the queue is gone")
	})
}

// A queue entry whose Locker no longer listens (its process died) is
// skipped: handing it the key would leave the key to a dead waiter until
// its lease ran out.
func TestAReleaseSkipsWaitersNobodyListensFor(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t, scripted)
		holder, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		dead := "10000:20000:" + newToken() + ":" + newToken()
		require.NoError(t, b.raw.RPush(ctx, waitersKey("lock.k"), dead).Err())
		require.NoError(t, holder.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "released, not handed to the dead waiter")
	})
}

// A waiter whose context ends leaves the queue; if a release handed it the
// key in the meantime, it hands the key on instead of leaving it held.
func TestAWaiterThatGivesUpLeavesTheQueueAndHandsOnALateHandoff(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t, scripted)
		_, err := b.locker(t, scripted).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		quitCtx, quit := context.WithCancel(ctx)
		gaveUp := make(chan error, 1)
		go func() { _, err := l.Acquire(quitCtx, "lock.k"); gaveUp <- err }()
		b.queued(t, "lock.k", 1)
		quit()
		require.ErrorIs(t, <-gaveUp, ErrNotAcquired)
		b.queued(t, "lock.k", 0)

		// The handoff raced with the end of its wait: the key carries the
		// entry's token, and the entry is off the queue.
		entry := l.newQueueEntry()
		require.NoError(t, b.raw.Set(ctx, "lock.k", formatValue(b.clock.Now().Add(10*time.Second), entry.token), 0).Err())
		l.leaveQueue(ctx, "lock.k", entry)
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "the late handoff is handed on")
	})
}

// A handoff whose message never arrives (a subscription that dropped) is
// found by the waiter's next poll: the key carries its token.
func TestAWaiterFindsAHandoffWhoseMessageWasLost(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		_, err := b.locker(t, scripted).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		acquired := acquireInBackground(t, b.locker(t, scripted), "lock.k")
		entry := b.queued(t, "lock.k", 1)[0]
		token := entry[strings.LastIndexByte(entry, ':')+1:]

		// What the release script does, without its PUBLISH.
		handed := formatValue(b.clock.Now().Add(10*time.Second), token)
		require.NoError(t, b.raw.LPop(ctx, waitersKey("lock.k")).Err())
		require.NoError(t, b.raw.Set(ctx, "lock.k", handed, 0).Err())
		lock := <-acquired
		require.NotNil(t, lock)
		assert.Equal(t, handed, lock.value)
		assert.Zero(t, b.raw.LLen(ctx, waitersKey("lock.k")).Val(), "it does not queue again")
		require.NoError(t, lock.Release(ctx))
	})
}

// A waiter that wins the key outside the queue (the holder's lease ran
// out and it took it over) takes its entry off the queue, so that no
// release hands it a second lease.
func TestAWaiterThatTakesOverLeavesTheQueue(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		crashed, err := b.locker(t, scripted).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		acquired := acquireInBackground(t, b.locker(t, scripted), "lock.k")
		b.queued(t, "lock.k", 1)
		b.clock.Set(crashed.ExpiresAt().Add(time.Millisecond))
		lock := <-acquired
		require.NotNil(t, lock)
		assert.Zero(t, b.raw.LLen(ctx, waitersKey("lock.k")).Val())
		require.NoError(t, lock.Release(ctx))
	})
}

// Locker.Close ends the subscription a waiter opened at once, rather than
// handoffLinger after; the Locker can still wait later.
func TestCloseEndsTheHandoffSubscription(t *testing.T) {
	b := newBackend(t, "miniredis", startMiniredis(t))
	holder, err := b.locker(t, scripted).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	l := b.locker(t, scripted)
	acquired := acquireInBackground(t, l, "lock.k")
	b.queued(t, "lock.k", 1)
	require.NoError(t, holder.Release(ctx))
	require.NotNil(t, <-acquired)
	channel := l.handoff.channel()
	assert.EqualValues(t, 1, b.raw.PubSubNumSub(ctx, channel).Val()[channel], "lingering")
	require.NoError(t, l.Close())
	// The server drops the subscription once it sees the connection close.
	require.Eventually(t, func() bool { return b.raw.PubSubNumSub(ctx, channel).Val()[channel] == 0 }, handoffLinger/3, time.Millisecond, "closed before the linger ends")
}

// Waiters of one Locker share its subscription and are told apart by
// token; once the Locker listens, a new waiter queues with its very first
// attempt instead of being refused once first.
func TestWaitersOfOneLockerShareItsSubscription(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t, scripted).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		client := b.client(t)
		l := b.lockerOn(t, client, scripted)
		warm(t, l)
		sent := record(client)
		first := acquireInBackground(t, l, "lock.k")
		b.queued(t, "lock.k", 1)
		second := acquireInBackground(t, l, "lock.k")
		b.queued(t, "lock.k", 2)
		assert.Equal(t, 3, strings.Count(sent.names(), "EVALSHA"), "refused and queued, then queued at once")

		require.NoError(t, holder.Release(ctx))
		lock := <-first
		require.NotNil(t, lock)
		require.NoError(t, lock.Release(ctx))
		next := <-second
		require.NotNil(t, next)
		require.NoError(t, next.Release(ctx))
	})
}
