package setnxlock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// The semaphore's promises that an independent review found broken, each
// failing before its fix (semaphore.go, semaphorecount.go).

// After a shrink no acquisition keeps a permit past the new count. An
// Acquire already waiting when the count shrank waits on every permit of
// the old count. The release of a permit past the new count hands it to
// nobody (TestAPermitPastTheRecordedCountIsDeletedNotHandedOn), but the
// waiter's own attempt may take it, free; its wait then reads the count
// again and gives the permit back, or there would be more live holders
// than the recorded count (here 2 with 1 recorded).
func TestSemaphoreWaitThatOutlastsAShrinkKeepsNoPermitPastTheNewCount(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holder := semaphoreOf(t, b.locker(t, p.opt), "sem", 2)
		var held []*Lock
		for range 2 {
			lock, err := holder.TryAcquire(ctx)
			require.NoError(t, err)
			held = append(held, lock)
		}
		waitCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		type result struct {
			lock *Lock
			err  error
		}
		got := make(chan result, 1)
		waiter := semaphoreOf(t, b.locker(t, p.opt), "sem", 2)
		go func() {
			lock, err := waiter.Acquire(waitCtx)
			got <- result{lock, err}
		}()
		require.Eventually(t, func() bool {
			st, err := holder.Status(ctx)
			return err == nil && st.Waiters >= 1
		}, 10*time.Second, time.Millisecond, "the waiter waits on the permits")

		operator := semaphoreOf(t, b.locker(t, p.opt), "sem", 2)
		require.NoError(t, operator.Resize(ctx, 1))
		time.Sleep(5 * time.Millisecond) // past the starvation threshold
		past := held[0]
		if past.Key() != PermitKey("sem", 1) {
			past = held[1]
		}
		require.Equal(t, PermitKey("sem", 1), past.Key())
		require.NoError(t, past.Release(ctx), "the holder of a permit past the new count gives it up")

		r := await.Recv(t, got, "the earlier waiter's Acquire")
		if r.err == nil {
			defer func() { _ = r.lock.Release(ctx) }()
			st, err := operator.Status(ctx)
			require.NoError(t, err)
			assert.NotEqual(t, PermitKey("sem", 1), r.lock.Key(),
				"after Resize(1) an acquisition took permit 1, past the recorded count; live holders now %d with %d recorded",
				len(st.Holders), st.Permits)
			return
		}
		assert.True(t, errors.Is(r.err, ErrNotAcquired) || errors.Is(r.err, ErrPermitsMismatch), "%v", r.err)
	})
}

// Semaphore.Acquire waits until a permit is free or the context ends, as
// Locker.Acquire waits, through transient network errors: one lost request
// in its first pass over the permits (tryEach) does not end it.
func TestSemaphoreAcquireWaitsThroughATransientError(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holder := semaphoreOf(t, b.locker(t, p.opt), "sem", 1)
		lock, err := holder.TryAcquire(ctx)
		require.NoError(t, err)

		client := b.client(t)
		var armed atomic.Bool
		armed.Store(true)
		client.AddHook(failOnceOnKey{key: PermitKey("sem", 0), armed: &armed})
		waiter := semaphoreOf(t, b.lockerOn(t, client, p.opt), "sem", 1)

		released := make(chan error, 1)
		go func() {
			time.Sleep(50 * time.Millisecond)
			released <- lock.Release(ctx)
		}()
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		got, err := waiter.Acquire(waitCtx)
		require.NoError(t, await.Recv(t, released, "the holder's release"))
		assert.False(t, armed.Load(), "the fault was injected")
		if assert.NoError(t, err, "Acquire returned with its context live (%v), instead of waiting as Locker.Acquire does", waitCtx.Err()) {
			assert.Equal(t, PermitKey("sem", 0), got.Key())
			require.NoError(t, got.Release(ctx))
		}
	})
}

// failOnceOnKey fails, once while armed, the first command or pipeline
// that names key, before it reaches the server: a request lost on a
// connection that was cut (transient, retryable).
type failOnceOnKey struct {
	key   string
	armed *atomic.Bool
}

func (f failOnceOnKey) names(cmd redis.Cmder) bool {
	for _, arg := range cmd.Args() {
		if s, ok := arg.(string); ok && s == f.key {
			return true
		}
	}
	return false
}

func (f failOnceOnKey) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f failOnceOnKey) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.names(cmd) && f.armed.CompareAndSwap(true, false) {
			cmd.SetErr(errLostReply{})
			return errLostReply{}
		}
		return next(ctx, cmd)
	}
}

func (f failOnceOnKey) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if f.names(cmd) && f.armed.CompareAndSwap(true, false) {
				for _, c := range cmds {
					c.SetErr(errLostReply{})
				}
				return errLostReply{}
			}
		}
		return next(ctx, cmds)
	}
}

// H7 for the count key: a count key of another type (a list) is reported
// as ErrNotLockValue by Acquire, TryAcquire and Status, and left
// untouched, as a string that is not a count is.
func TestSemaphoreCountKeyOfAnotherTypeIsNotLockValue(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		require.NoError(t, b.raw.RPush(ctx, PermitsKey("sem"), "x").Err())
		s := semaphoreOf(t, b.locker(t), "sem", 2)
		_, err := s.TryAcquire(ctx)
		assert.ErrorIs(t, err, ErrNotLockValue, "TryAcquire: %v", err)
		_, err = s.Status(ctx)
		assert.ErrorIs(t, err, ErrNotLockValue, "Status: %v", err)
		typ := b.raw.Type(ctx, PermitsKey("sem")).Val()
		assert.Equal(t, "list", typ, "left untouched")
		assert.Equal(t, "<missing>", b.value(t, PermitKey("sem", 0)), "no permit taken")
	})
}

// Resize, an operator's act, replaces the recorded count, but leaves a
// count key of another type untouched (H7).
func TestSemaphoreResizeLeavesACountKeyOfAnotherTypeUntouched(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		require.NoError(t, b.raw.RPush(ctx, PermitsKey("sem"), "someone else's").Err())
		s := semaphoreOf(t, b.locker(t), "sem", 2)
		err := s.Resize(ctx, 3)
		typ := b.raw.Type(ctx, PermitsKey("sem")).Val()
		assert.True(t, err != nil && strings.Contains(typ, "list"),
			"Resize replaced a list at the count key (err %v, type now %s)", err, typ)
	})
}

// The control of the test above: Locker.Acquire, given the same fault on
// the same key, waits and takes the lock once it is released.
func TestLockerAcquireWaitsThroughTheSameTransientError(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		lock, err := b.locker(t, p.opt).TryAcquire(ctx, PermitKey("sem", 0))
		require.NoError(t, err)
		client := b.client(t)
		var armed atomic.Bool
		armed.Store(true)
		client.AddHook(failOnceOnKey{key: PermitKey("sem", 0), armed: &armed})
		waiter := b.lockerOn(t, client, p.opt)
		released := make(chan error, 1)
		go func() {
			time.Sleep(50 * time.Millisecond)
			released <- lock.Release(ctx)
		}()
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		got, err := waiter.Acquire(waitCtx, PermitKey("sem", 0))
		require.NoError(t, await.Recv(t, released, "the holder's release"))
		assert.False(t, armed.Load(), "the fault was injected")
		require.NoError(t, err)
		require.NoError(t, got.Release(ctx))
	})
}

// When ctx ends first, Semaphore.Acquire returns an error matching both
// ErrNotAcquired and ctx.Err(), as Locker.Acquire does, also when it has
// ended before the count's read or the first pass over the permits.
func TestSemaphoreAcquireOnAnEndedContextMatchesErrNotAcquired(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t)
		ended, cancel := context.WithCancel(ctx)
		cancel()
		_, err := l.Acquire(ended, PermitKey("sem", 0))
		require.ErrorIs(t, err, ErrNotAcquired, "the control: Locker.Acquire")
		require.ErrorIs(t, err, context.Canceled)

		s := semaphoreOf(t, l, "sem", 2)
		_, err = s.Acquire(ended)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, ErrNotAcquired, "Semaphore.Acquire before the count is recorded: %v", err)

		_, err = s.TryAcquire(ctx) // records the count
		require.NoError(t, err)
		_, err = s.Acquire(ended)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, ErrNotAcquired, "Semaphore.Acquire with the count recorded: %v", err)
	})
}
