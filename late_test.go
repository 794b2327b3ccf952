package setnxlock

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// A late request never rolls a lease back (H10, DESIGN.md): any single
// command the library sent, delivered again late (held up in the network
// past the client's ReadTimeout, or the first copy of a go-redis retry),
// leaves the key stating an end no earlier than its holder believes.

// heldPoll holds back, once armed, a client's next run of queued.lua: the
// request stays in the network (it is not sent), and the client sees what
// go-redis reports after its ReadTimeout. The test delivers it later.
type heldPoll struct {
	armed atomic.Bool
	held  chan []any // the held request's arguments
}

func holdPoll(c *redis.Client) *heldPoll {
	h := &heldPoll{held: make(chan []any, 1)}
	c.AddHook(h)
	return h
}

func (h *heldPoll) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *heldPoll) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "evalsha" || scriptNames[fmt.Sprint(cmd.Args()[1])] != "queued" || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		h.held <- slices.Clone(cmd.Args())
		cmd.SetErr(errLostReply{})
		return errLostReply{}
	}
}
func (h *heldPoll) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// L1 (issue 28): a queued waiter's poll, stamped with its lease at that
// moment, is held up past the client's timeout. The waiter then holds with
// a later end (its claim, or a Refresh), and the held poll lands: the key
// carries the waiter's token, and the script used to write the poll's
// older stamp over it. From that older end on a third client took the key
// while the holder still believed its lease: "key states 10s; holder
// believes 14s; a third client holds".
func TestALateQueuedPollNeverRollsTheLeaseBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hold runs once the poll is held: the waiter comes to hold the key
		// with an end 4s past the held poll's.
		hold func(t *testing.T, b *backend, release func(), acquired <-chan *Lock) *Lock
	}{
		{"after the claim", func(t *testing.T, b *backend, release func(), acquired <-chan *Lock) *Lock {
			b.clock.Advance(4 * time.Second)
			release()
			return await.Recv(t, acquired, "the waiter's Acquire, by the handoff")
		}},
		{"after a Refresh", func(t *testing.T, b *backend, release func(), acquired <-chan *Lock) *Lock {
			release()
			lock := await.Recv(t, acquired, "the waiter's Acquire, by the handoff")
			b.clock.Advance(4 * time.Second)
			require.NoError(t, lock.Refresh(ctx, 10*time.Second))
			return lock
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				holder, err := b.locker(t, scripted).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				client := b.client(t)
				held := holdPoll(client)
				w := b.lockerOn(t, client, scripted)
				warm(t, w)
				acquired := acquireInBackground(t, w, "lock.k")
				b.queued(t, "lock.k", 1)
				held.armed.Store(true)
				poll := await.Recv(t, held.held, "the waiter's next poll")

				lock := tc.hold(t, b, func() { require.NoError(t, holder.Release(ctx)) }, acquired)
				require.NotNil(t, lock)
				require.Equal(t, b.start.Add(14*time.Second), lock.ExpiresAt())

				_ = b.raw.Do(ctx, poll...).Err() // the held poll lands
				states, err := parseExpiry(b.value(t, "lock.k"))
				require.NoError(t, err)
				assert.False(t, states.Before(lock.ExpiresAt()), "key states %v; holder believes %v",
					states.Sub(b.start), lock.ExpiresAt().Sub(b.start))
				b.clock.Set(b.start.Add(12 * time.Second))
				_, err = b.locker(t, scripted).TryAcquire(ctx, "lock.k")
				assert.ErrorIs(t, err, ErrNotAcquired, "a third client holds while the holder believes it holds until 14s")
				assert.NoError(t, lock.Err())
			})
		})
	}
}
