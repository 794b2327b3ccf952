package setnxlock

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// Behaviours of the queue first found wanting on its command transport
// (commandqueue.go), on every queueing path like the rest of the queue's
// contract (queue_contract_test.go).

// A handoff that nobody hears (the entry's Locker is gone) is handed on
// at once to the next in line, within the release, instead of holding the
// key for the claim window.
func TestAHandoffNobodyHeardIsHandedOnToTheNextWaiter(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		waiter := acquireInBackground(t, b.locker(t, path), "lock.k")
		entry := b.queued(t, "lock.k", 1)[0]
		dead := newToken() + ":" + newToken()
		require.NoError(t, b.raw.ZAdd(ctx, waitersKey("lock.k"), redis.Z{Score: 1, Member: dead}).Err(), "first in line")

		require.NoError(t, holder.Release(ctx))
		assert.Equal(t, entryToken(entry), tokenOf(b.value(t, "lock.k")), "handed on to the live waiter by the release itself")
		lock := await.Recv(t, waiter, "the live waiter's Acquire")
		require.NotNil(t, lock)
		assert.Empty(t, b.queuedNow("lock.k"), "the dead entry is gone with the live one")
		require.NoError(t, lock.Release(ctx))
	})
}

// loseTheFirstWin makes the first write that wins the key (wonKey) for a
// context tagged with workerMark report its reply lost (H5), and reports
// whether it has.
func loseTheFirstWin(c *redis.Client) *atomic.Bool {
	lost := new(atomic.Bool) // the hook runs on every goroutine of the client, its subscription's dial included
	c.AddHook(stallHook{before: func(context.Context) {}, after: func(ctx context.Context, cmd redis.Cmder, err error) error {
		if ctx.Value(workerMark{}) != nil && wonKey(cmd, err) && lost.CompareAndSwap(false, true) {
			return errLostReply{}
		}
		return nil
	}})
	return lost
}

// A queued attempt's win (SET NX, SETNX, queued.lua) whose reply was lost
// wrote a value carrying the wait's token: the wait's next attempt claims
// it as its own, and the claim takes its entry off the queue (every way
// out removes the entry).
func TestAQueuedWinWhoseReplyWasLostIsClaimedAndLeavesTheQueue(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path, barging).TryAcquire(ctx, "lock.k") // the key is freed, not handed
		require.NoError(t, err)
		client := b.client(t)
		lost := loseTheFirstWin(client)
		l := b.lockerOn(t, client, path, barging)
		warm(t, l)
		acquired := make(chan *Lock, 1)
		go func() {
			lock, err := l.Acquire(context.WithValue(await.Context(t), workerMark{}, 1), "lock.k")
			assert.NoError(t, err)
			claimSettled(lock)
			acquired <- lock
		}()
		entry := b.queued(t, "lock.k", 1)[0]

		require.NoError(t, holder.Release(ctx))
		lock := await.Recv(t, acquired, "the waiter's Acquire")
		require.NotNil(t, lock)
		require.True(t, lost.Load(), "a win's reply was lost")
		assert.Equal(t, entryToken(entry), lock.token, "its own lost write, claimed")
		assert.Equal(t, lock.value, b.value(t, "lock.k"))
		assert.Empty(t, b.queuedNow("lock.k"), "the claim took the entry off the queue")
		require.NoError(t, lock.Release(ctx))
	})
}
