package setnxlock

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The chaos run's slow-free-wait in mode classic (chaos-classic-ci4): a
// Release returned nil and left the key holding its own lease, which
// nobody held, until the lease ran out. On the command transport the
// hand-on loop (commandhandon.go) first drops the listeners at the head of
// the queue (waits on wake-ups, wakelisten.go), one watched transaction
// each: the key is still ours, untouched, after each. handOnOwned counted
// the key ours, handed on, from the first of those drops, so a later step
// that failed (a connection cut, a watch aborted eight times) or a queue
// with more listeners than maxHandOns ended the loop with "handed", and
// Release reported success (H5's rule: not ours any more, so released)
// while the key still held our value.

// listenAhead puts n listeners at the head of key's queue, ahead of
// everyone (their scores are the smallest).
func listenAhead(t *testing.T, b *backend, key string, n int) {
	t.Helper()
	c := b.client(t)
	for i := range n {
		require.NoError(t, c.ZAdd(ctx, waitersKey(key), redis.Z{Score: float64(i + 1), Member: formatListener(newToken())}).Err())
	}
}

// cutAfterListenerDrop makes the client's first watched read after it
// dropped a listener (a MULTI/EXEC with a ZREM alone) fail before it
// reaches the server, as a connection the proxy cut does.
func cutAfterListenerDrop(c *redis.Client) *atomic.Bool {
	dropped, cut := new(atomic.Bool), new(atomic.Bool)
	c.AddHook(pipelineHook(func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
		return func(ctx context.Context, cmds []redis.Cmder) error {
			if dropped.Load() && len(cmds) > 0 && cmds[0].Name() == "watch" && cut.CompareAndSwap(false, true) {
				for _, cmd := range cmds {
					cmd.SetErr(errLostReply{})
				}
				return errLostReply{}
			}
			err := next(ctx, cmds)
			if err == nil && dropsListenerOnly(cmds) {
				dropped.Store(true)
			}
			return err
		}
	}))
	return cut
}

// dropsListenerOnly reports whether cmds are the hand-on step that drops
// a listener: MULTI, ZREM, EXEC.
func dropsListenerOnly(cmds []redis.Cmder) bool {
	return len(cmds) == 3 && cmds[0].Name() == "multi" && cmds[1].Name() == "zrem" && cmds[2].Name() == "exec"
}

// pipelineHook is a redis.Hook that wraps pipelines alone.
type pipelineHook func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook

func (h pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return h(next)
}

// A Release that returns nil has not left our value in the key: a step of
// the hand-on loop that fails after it dropped a listener (the key still
// ours) is the Release's failure, or the key is deleted instead.
func TestAReleaseThatDroppedAListenerAndWasCutLeavesNothingHeld(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		client := b.client(t)
		cut := cutAfterListenerDrop(client)
		l := b.lockerOn(t, client, path)
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		listenAhead(t, b, "lock.k", 1)

		err = lock.Release(ctx)
		if err != nil {
			// In doubt: the caller may call Release again (H5).
			require.True(t, cut.Load(), "only the cut may fail the Release: %v", err)
			require.NoError(t, lock.Release(ctx), "the Release called again")
		}
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "released, yet the key holds: cut=%v", cut.Load())
	})
}

// abortAfterListenerDrop makes every watched read of the client after it
// dropped a listener be followed, before its EXEC, by a wait on wake-ups
// listing itself in the queue (another client's ZADD): the queue changes
// under every watch, as it does while waits on wake-ups poll.
func abortAfterListenerDrop(t *testing.T, b *backend, c *redis.Client, key string) *atomic.Int32 {
	other := b.client(t)
	dropped, aborted := new(atomic.Bool), new(atomic.Int32)
	c.AddHook(pipelineHook(func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
		return func(ctx context.Context, cmds []redis.Cmder) error {
			err := next(ctx, cmds)
			switch {
			case err == nil && dropsListenerOnly(cmds):
				dropped.Store(true)
			case dropped.Load() && len(cmds) > 0 && cmds[0].Name() == "watch":
				aborted.Add(1)
				_ = other.ZAdd(ctx, waitersKey(key), redis.Z{Score: float64(1000 + aborted.Load()), Member: formatListener(newToken())}).Err()
			}
			return err
		}
	}))
	return aborted
}

// A Release whose hand-on loop dropped a listener and then finds the
// queue changing under every watch (maxTransactionAttempts) frees the key
// as if nobody queued, as it does when that happens at its first step.
func TestAReleaseThatDroppedAListenerInABusyQueueLeavesNothingHeld(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		client := b.client(t)
		aborted := abortAfterListenerDrop(t, b, client, "lock.k")
		lock, err := b.lockerOn(t, client, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		listenAhead(t, b, "lock.k", 1)

		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "released, yet the key holds our value (%d watches aborted)", aborted.Load())
	})
}

// With more listeners at the head of the queue than the hand-on loop has
// steps (maxHandOns), the loop ends before it frees the key: the key must
// still be freed, not reported handed on.
func TestAReleaseBehindManyListenersLeavesNothingHeld(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		lock, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		listenAhead(t, b, "lock.k", maxHandOns+1)

		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "released, yet the key holds our value")
	})
}
