package setnxlock

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// X2 (issue 23): an ACL user refused one key's queue. A wait on that key
// queues (its Locker listens for handoffs, for a wait on another key), and
// its queued attempt is refused the queue: on the scripts, queued.lua is
// refused and acquire.lua wins the free key within the same attempt; on
// the commands, SET NX wins before the queue is touched. The win's reply
// is lost (H5). The wait must not then wait out its own lease (the
// ManualClock stands still here: it would wait for ever): the value it
// wrote is recognised as its own, or freed when the wait stops queueing,
// even though taking the entry off the queue is refused.
func TestAWaitRefusedTheQueueDoesNotWaitOutItsOwnLostWrite(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		l, lose := queueRefusedWaiter(t, b, path)
		lose.armed.Store(true)
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lock, err := l.Acquire(waitCtx, "lock.k")
		require.NoError(t, err, "the wait waited out its own lease, written by an attempt whose reply was lost")
		require.True(t, lose.lost.Load(), "the schedule: a winning write of the wait lost its reply")
		assert.Equal(t, lock.value, b.value(t, "lock.k"))
		require.NoError(t, lock.Release(ctx))
	})
}

// X2, and everyone else: the wait gives up right after the lost reply. The
// value it wrote must not hold the key for a lease nobody holds.
func TestAWaitRefusedTheQueueThatGivesUpLeavesNoLeaseBehind(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		l, lose := queueRefusedWaiter(t, b, path)
		waitCtx, cancel := context.WithCancel(await.Context(t))
		lose.then = cancel // the wait gives up as the reply is lost
		lose.armed.Store(true)
		_, err := l.Acquire(waitCtx, "lock.k")
		require.ErrorIs(t, err, context.Canceled)
		require.True(t, lose.lost.Load(), "the schedule: a winning write of the wait lost its reply")
		lock, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "the key is held for a lease nobody holds: %s", b.value(t, "lock.k"))
		require.NoError(t, lock.Release(ctx))
	})
}

// X2 on the scripts: the attempt refused the queue writes, within the same
// attempt, a value of its own token, not of its entry's (one owner per
// value, protocol.go), so the next attempt recognises that write as its
// own (H5) and holds it, rather than delete it on leaving the queue and
// write another: the key is never free in between for a third client.
func TestAnUnqueuedWriteOfAQueuedWaitIsRecognisedAfterALostReply(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l, lose := queueRefusedWaiter(t, b, scripted)
		var lost string
		lose.then = func() { lost = b.value(t, "lock.k") }
		lose.armed.Store(true)
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lock, err := l.Acquire(waitCtx, "lock.k")
		require.NoError(t, err)
		assert.Equal(t, lost, lock.value, "the wait holds the write whose reply was lost")
		require.NoError(t, lock.Release(ctx))
	})
}

// queueRefusedWaiter returns a Locker on path, for a user refused the
// queue of lock.k (and allowed that of lock.other), that listens for
// handoffs: another of its waits queues on lock.other, held for the test.
// The hook returned loses the reply of the wait's first write to lock.k
// that the server applies, once armed.
func queueRefusedWaiter(t *testing.T, b *backend, path Option) (*Locker, *loseFirstWin) {
	t.Helper()
	client := b.client(t)
	if b.name == "redis-server" {
		client = restrictedClient(t, b, "x2", "resetkeys", "~lock.*", "~{lock.other}.waiters", "&*", "+@all")
	} else {
		client.AddHook(refuseKey{key: waitersKey("lock.k")})
	}
	lose := &loseFirstWin{key: "lock.k"}
	client.AddHook(lose)
	l := b.lockerOn(t, client, path)
	warm(t, l)
	_, err := b.locker(t, path).TryAcquire(ctx, "lock.other")
	require.NoError(t, err)
	otherCtx, cancel := context.WithCancel(await.Context(t))
	t.Cleanup(cancel)
	go func() { _, _ = l.Acquire(otherCtx, "lock.other") }()
	b.queued(t, "lock.other", 1)
	return l, lose
}

// refuseKey plays, on miniredis, an ACL user refused key: every command
// that names it is refused (NOPERM) without being sent, and a transaction
// that queues one is aborted (EXECABORT), as redis-server does.
type refuseKey struct{ key string }

var errNoPermKey = serverError("NOPERM No permissions to access a key")

func (r refuseKey) names(cmd redis.Cmder) bool {
	return slices.ContainsFunc(cmd.Args(), func(a any) bool { s, _ := a.(string); return s == r.key })
}

func (r refuseKey) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r refuseKey) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if r.names(cmd) {
			cmd.SetErr(errNoPermKey)
			return errNoPermKey
		}
		return next(ctx, cmd)
	}
}

func (r refuseKey) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		refused := slices.ContainsFunc(cmds, r.names)
		if !refused {
			return next(ctx, cmds)
		}
		if cmds[0].Name() == "multi" {
			for _, cmd := range cmds {
				cmd.SetErr(serverError("EXECABORT Transaction discarded because of previous errors."))
				if r.names(cmd) {
					cmd.SetErr(errNoPermKey)
				}
			}
			return cmds[len(cmds)-1].Err()
		}
		var sent []redis.Cmder
		for _, cmd := range cmds {
			if r.names(cmd) {
				cmd.SetErr(errNoPermKey)
				continue
			}
			sent = append(sent, cmd)
		}
		if len(sent) > 0 {
			_ = next(ctx, sent)
		}
		return errNoPermKey
	}
}

// loseFirstWin, once armed, loses the reply of the first command sent
// alone on key that the server applies with success: a script run on it,
// or a SET or SETNX that created it (H5). then, if set, runs after.
type loseFirstWin struct {
	key         string
	armed, lost atomic.Bool
	then        func()
}

func (h *loseFirstWin) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseFirstWin) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && !errors.Is(err, redis.Nil) || !h.wins(cmd, err) || !h.armed.CompareAndSwap(true, false) { // SET NX PX GET answers nil when it wins
			return err
		}
		h.lost.Store(true)
		if h.then != nil {
			h.then()
		}
		return errLostReply{}
	}
}

func (h *loseFirstWin) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// wins reports whether cmd, answered err (nil, or redis.Nil for SET NX PX
// GET), wrote key.
func (h *loseFirstWin) wins(cmd redis.Cmder, err error) bool {
	args := cmd.Args()
	switch name := cmd.Name(); {
	case (name == "evalsha" || name == "eval") && len(args) > 3:
		reply, _ := cmd.(*redis.Cmd).Slice()
		return args[3] == h.key && len(reply) > 0 && reply[0] == int64(1) // a script's "won"
	case name == "set" && len(args) > 1 && args[1] == h.key:
		if _, ok := cmd.(*redis.StringCmd); ok { // SET NX PX GET: nil when it created the key
			return errors.Is(err, redis.Nil)
		}
		return cmd.(*redis.StatusCmd).Val() == "OK"
	case name == "setnx" && len(args) > 1 && args[1] == h.key:
		return cmd.(*redis.IntCmd).Val() == 1
	}
	return false
}
