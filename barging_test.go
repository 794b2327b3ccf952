package setnxlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// Adaptive barging (WithStarvationThreshold; handon.lua, and
// commandqueue.go without scripts), on every path: while the first
// waiter in line has waited less than the threshold, a release frees the
// key and only wakes that waiter, which keeps its place; once it has
// waited the threshold, releases hand the key over in order. The clock of
// these tests stands still unless a test moves it, so every wait is 0 until
// then.

// oneStall makes the next attempt (its first command: a script, SET or
// SETNX) sent for a context tagged with workerMark, once armed, wait until
// the test opens the gate, or fail unsent if that context ends first: a
// waiter held between hearing of the key and attempting, or giving up
// there.
type oneStall struct {
	armed    atomic.Bool
	arrived  chan struct{} // closed when the stalled command arrives
	open     chan struct{}
	openOnce sync.Once
}

func stallOnce(t *testing.T, c *redis.Client) *oneStall {
	s := &oneStall{arrived: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(s.pass)
	c.AddHook(s)
	return s
}

func (s *oneStall) pass() { s.openOnce.Do(func() { close(s.open) }) }

// wait reports why the command must not be sent, if it must not.
func (s *oneStall) wait(ctx context.Context, cmd redis.Cmder) error {
	switch cmd.Name() {
	case "evalsha", "eval", "set", "setnx":
	default:
		return nil
	}
	if ctx.Value(workerMark{}) == nil || !s.armed.CompareAndSwap(true, false) {
		return nil
	}
	close(s.arrived)
	select {
	case <-s.open: // bounded: the test opens the gate, or its cleanup does
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *oneStall) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *oneStall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := s.wait(ctx, cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (s *oneStall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next // an attempt begins with a single command
}

// listenTo subscribes a raw client to a Locker's handoff channel and
// returns its messages once the subscription is confirmed.
func listenTo(t *testing.T, b *backend, l *Locker) <-chan *redis.Message {
	t.Helper()
	pubsub := b.raw.Subscribe(ctx, handoffChannel(l.handoff.id))
	t.Cleanup(func() { _ = pubsub.Close() })
	_, err := pubsub.Receive(await.Context(t))
	require.NoError(t, err, "the subscription's confirmation")
	return pubsub.Channel()
}

// stalledWait is a waiting Acquire on a Locker of its own, whose next
// command after the test arms the stall waits for the gate.
type stalledWait struct {
	l        *Locker
	stall    *oneStall
	giveUp   context.CancelFunc
	failed   chan error
	acquired chan *Lock
}

// stalledWaiter starts a stalledWait on key, on a Locker with opts.
func stalledWaiter(t *testing.T, b *backend, key string, opts ...Option) *stalledWait {
	t.Helper()
	return stalledWaiterOn(t, b, b.client(t), key, opts...)
}

// stalledWaiterOn is stalledWaiter on a client the test prepared.
func stalledWaiterOn(t *testing.T, b *backend, client *redis.Client, key string, opts ...Option) *stalledWait {
	t.Helper()
	w := &stalledWait{stall: stallOnce(t, client), l: b.lockerOn(t, client, opts...), failed: make(chan error, 1), acquired: make(chan *Lock, 1)}
	waitCtx, cancel := context.WithCancel(context.WithValue(await.Context(t), workerMark{}, 1))
	t.Cleanup(cancel)
	w.giveUp = cancel
	go func() {
		lock, err := w.l.Acquire(waitCtx, key)
		if err != nil {
			w.failed <- err
			return
		}
		claimSettled(lock)
		w.acquired <- lock
	}()
	return w
}

// heldWithAStalledWaiter takes lock.k and queues a stalledWait on it, its
// stall armed, both on Lockers with opts, and returns them with the queue.
func heldWithAStalledWaiter(t *testing.T, b *backend, opts ...Option) (*Lock, *stalledWait, []string) {
	t.Helper()
	holder, err := b.locker(t, opts...).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	w := stalledWaiter(t, b, "lock.k", opts...)
	entries := b.queued(t, "lock.k", 1)
	w.stall.armed.Store(true)
	return holder, w, entries
}

func TestAReleaseLetsWaitersBargeWhileTheFirstHasWaitedLessThanTheThreshold(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holder, waiter, entries := heldWithAStalledWaiter(t, b, p.opt)
		heard := listenTo(t, b, waiter.l)

		require.NoError(t, holder.Release(ctx))
		msg := await.Recv(t, heard, "the first waiter woken by the release")
		assert.Equal(t, entryToken(entries[0])+"::lock.k", msg.Payload, "a wake-up: no provisional end")
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "the key is freed: no value is written for a waiter that has not waited the threshold")
		assert.Equal(t, entries, b.queuedNow("lock.k"), "the woken waiter keeps its place")

		barger, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "whoever comes first takes the free key")
		require.NoError(t, barger.Release(ctx))
		await.Recv(t, heard, "the first waiter woken again")

		waiter.stall.pass()
		lock := await.Recv(t, waiter.acquired, "the woken waiter's Acquire")
		assert.Equal(t, lock.value, b.value(t, "lock.k"), "the waiter took the free key with its own value")
		assert.Empty(t, b.queuedNow("lock.k"), "its win took it off the queue")
		require.NoError(t, lock.Release(ctx))
	})
}

func TestAReleaseHandsOverOnceTheFirstWaiterHasWaitedTheThreshold(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holder, waiter, entries := heldWithAStalledWaiter(t, b, p.opt)

		b.clock.Advance(DefaultStarvationThreshold)
		require.NoError(t, holder.Release(ctx))
		assert.Contains(t, b.value(t, "lock.k"), ":"+entryToken(entries[0]), "the key is handed to the waiter that waited the threshold")
		_, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "nobody barges in once a waiter has waited the threshold")

		waiter.stall.pass()
		lock := await.Recv(t, waiter.acquired, "the waiter's Acquire")
		assert.Equal(t, lock.value, b.value(t, "lock.k"), "the waiter claimed the handed key")
		require.NoError(t, lock.Release(ctx))
	})
}

// A woken waiter that gives up before it takes the free key must not leave
// it to a poll: leaving the queue wakes the next in line.
func TestAWokenWaiterThatLeavesWakesTheNextInLine(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holder, first, _ := heldWithAStalledWaiter(t, b, p.opt)
		next := stalledWaiter(t, b, "lock.k", p.opt)
		entries := b.queued(t, "lock.k", 2)
		// The next waiter's own polls (announcedPoll, on real time) must not
		// take the key the release leaves free before the first one's leave
		// wakes it: under load that wait can outlast a poll. Its next attempt
		// waits at the gate until the test has heard the wake-up.
		next.stall.armed.Store(true)
		firstHeard, nextHeard := listenTo(t, b, first.l), listenTo(t, b, next.l)

		require.NoError(t, holder.Release(ctx))
		await.Recv(t, firstHeard, "the first waiter woken by the release")
		await.Recv(t, first.stall.arrived, "the first waiter's attempt after it was woken")
		first.giveUp()
		err := await.Recv(t, first.failed, "the first waiter giving up")
		require.True(t, errors.Is(err, context.Canceled), "%v", err)

		msg := await.Recv(t, nextHeard, "the next in line woken by the first one's leave")
		assert.Equal(t, entryToken(entries[1])+"::lock.k", msg.Payload, "a wake-up: no provisional end")
		next.stall.pass()
		lock := await.Recv(t, next.acquired, "the next waiter's Acquire")
		require.NoError(t, lock.Release(ctx))
	})
}
