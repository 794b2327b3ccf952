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

// The queue and the handoff without scripts (commandqueue.go). The
// behaviours the scripts and the commands share run on every queueing path
// in handoff_test.go and handoff_safety_test.go (queueingPaths); these are
// the commands' own, and one the scripts share that was first found
// wanting on the commands.

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

// loseTheFirstWin makes the first SET NX or SETNX that wins the key for a
// context tagged with workerMark report its reply lost (H5).
func loseTheFirstWin(c *redis.Client) {
	var lost atomic.Bool // the hook runs on every goroutine of the client, its subscription's dial included
	c.AddHook(stallHook{before: func(context.Context) {}, after: func(ctx context.Context, cmd redis.Cmder) error {
		if lost.Load() || ctx.Value(workerMark{}) == nil {
			return nil
		}
		won := false
		switch cmd := cmd.(type) {
		case *redis.StatusCmd:
			won = cmd.Name() == "set" && cmd.Val() == "OK"
		case *redis.IntCmd:
			won = cmd.Name() == "setnx" && cmd.Val() == 1
		}
		if won && lost.CompareAndSwap(false, true) {
			return errLostReply{}
		}
		return nil
	}})
}

// A queued attempt's SET NX whose reply was lost wrote a value carrying
// the wait's token: the wait's next attempt claims it as its own, and the
// claim takes its entry off the queue (every way out removes the entry).
func TestWithoutScriptsAQueuedWinWhoseReplyWasLostIsClaimedAndLeavesTheQueue(t *testing.T) {
	for _, p := range queueingPaths[1:] {
		t.Run(p.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				barging := paths[map[string]int{"commands": 1, "classic": 2}[p.name]].opt // the default threshold: the key is freed, not handed
				holder, err := b.locker(t, barging).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				client := b.client(t)
				loseTheFirstWin(client)
				l := b.lockerOn(t, client, barging)
				acquired := make(chan *Lock, 1)
				go func() {
					lock, err := l.Acquire(context.WithValue(await.Context(t), workerMark{}, 1), "lock.k")
					assert.NoError(t, err)
					acquired <- lock
				}()
				entry := b.queued(t, "lock.k", 1)[0]

				require.NoError(t, holder.Release(ctx))
				lock := await.Recv(t, acquired, "the waiter's Acquire")
				require.NotNil(t, lock)
				assert.Equal(t, entryToken(entry), lock.token, "its own lost write, claimed")
				assert.Equal(t, lock.value, b.value(t, "lock.k"))
				assert.Empty(t, b.queuedNow("lock.k"), "the claim took the entry off the queue")
				require.NoError(t, lock.Release(ctx))
			})
		})
	}
}
