package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Do runs work under a lock (do.go): held while fn runs, renewed whatever
// the options, released when fn returns, errs or panics.

var errWork = errors.New("the work failed")

// heldBy reports whether key is held, by trying it from another Locker.
func heldBy(t *testing.T, other *Locker, key string) bool {
	t.Helper()
	lock, err := other.TryAcquire(ctx, key)
	if errors.Is(err, ErrNotAcquired) {
		return true
	}
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	return false
}

func TestDoRunsTheWorkUnderTheLockAndReleasesIt(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		defer noLockGoroutineLeft(t)
		other := b.locker(t, p.opt)
		for _, c := range []struct {
			name    string
			returns error
		}{{"success", nil}, {"error", errWork}} {
			ran := false
			err := b.locker(t, p.opt).Do(ctx, "lock.k", func(workCtx context.Context) error {
				ran = true
				assert.True(t, heldBy(t, other, "lock.k"), "%s: held while fn runs", c.name)
				assert.NoError(t, workCtx.Err(), "%s: fn's context is live while the lock is held", c.name)
				return c.returns
			})
			assert.True(t, ran, c.name)
			if c.returns == nil {
				require.NoError(t, err, c.name)
			} else {
				require.ErrorIs(t, err, errWork, "%s: fn's error is Do's", c.name)
				require.NotErrorIs(t, err, ErrNotHeld, "%s: the lock was not lost", c.name)
			}
			assert.Equal(t, "<missing>", b.value(t, "lock.k"), "%s: released when fn returned", c.name)
		}
	})
}

// Without WithAutoRefresh, Do still renews the lease while fn runs: a job
// longer than the TTL keeps its lock (go-co-op/gocron-redis-lock#54).
func TestDoRenewsTheLeaseWhatevertheOptions(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		defer noLockGoroutineLeft(t)
		other := b.locker(t, p.opt)
		err := b.locker(t, p.opt, WithTTL(9*time.Second)).Do(ctx, "lock.k", func(workCtx context.Context) error {
			for range 10 { // 30s of manual time, more than three leases
				b.clock.Advance(3 * time.Second)
				want := b.clock.Now().Add(9 * time.Second)
				eventually(t, "renewed every TTL/3", func() bool {
					stated, err := parseExpiry(b.value(t, "lock.k"))
					return err == nil && !stated.Before(want.Truncate(time.Second))
				})
				require.True(t, heldBy(t, other, "lock.k"), "still held after %v", b.clock.Now().Sub(b.start))
			}
			return workCtx.Err()
		})
		require.NoError(t, err)
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// A lock lost while fn runs cancels fn's context with the loss as its
// cause, and Do's error matches ErrNotHeld, with fn's own error too; the
// key, someone else's now, is left alone (H3).
func TestDoReportsALossWhileTheWorkRan(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		defer noLockGoroutineLeft(t)
		var foreign string
		err := b.locker(t, p.opt, WithTTL(9*time.Second)).Do(ctx, "lock.k", func(workCtx context.Context) error {
			foreign = fmt.Sprint(b.clock.Now().Add(time.Hour).Unix()) // an operator's ForceRelease, and a classic client since
			b.set(t, "lock.k", foreign)
			b.clock.Advance(3 * time.Second) // the renewal finds the key not ours
			eventually(t, "fn's context cancelled by the loss", func() bool { return workCtx.Err() != nil })
			assert.ErrorIs(t, context.Cause(workCtx), ErrNotHeld)
			return fmt.Errorf("%w: %w", errWork, context.Cause(workCtx))
		})
		require.ErrorIs(t, err, errWork)
		require.ErrorIs(t, err, ErrNotHeld)
		assert.Equal(t, foreign, b.value(t, "lock.k"), "the other holder's value is left alone")

		err = b.locker(t, p.opt, WithTTL(9*time.Second)).Do(ctx, "lock.j", func(workCtx context.Context) error {
			b.set(t, "lock.j", foreign)
			b.clock.Advance(3 * time.Second)
			eventually(t, "fn's context cancelled by the loss", func() bool { return workCtx.Err() != nil })
			return nil // the work ignored why
		})
		require.ErrorIs(t, err, ErrNotHeld, "a loss is reported even when fn returned nil")
	})
}

// A panic in fn releases the lock, then goes on.
func TestDoReleasesWhenTheWorkPanics(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		defer noLockGoroutineLeft(t)
		l := b.locker(t, p.opt)
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			_ = l.Do(ctx, "lock.k", func(context.Context) error { panic(errWork) })
		}()
		assert.Equal(t, errWork, recovered, "the panic goes on")
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "released before the panic went on")
	})
}

// A Do whose context ends while another holds the key never runs fn, and
// its error matches ErrNotAcquired and the context's error, as Acquire's.
func TestDoThatCannotAcquireRunsNothing(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holder, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		err = b.locker(t, p.opt).Do(waitCtx, "lock.k", func(context.Context) error {
			t.Error("fn ran without the lock")
			return nil
		})
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, holder.Release(ctx))
	})
}

// A release that fails in transit after fn succeeded is Do's error; the
// lease is renewed no more and runs out by the clock.
func TestDoReportsAReleaseThatFailed(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		client := b.client(t)
		var refusing bool
		hookCommand(client, "evalsha", func(send func() error) error {
			if refusing {
				return errLostReply{} // never sent: the key stays ours
			}
			return send()
		})
		l := b.lockerOn(t, client, WithTTL(9*time.Second))
		var lease time.Time
		err := l.Do(ctx, "lock.k", func(context.Context) error {
			stated, err := parseExpiry(b.value(t, "lock.k"))
			require.NoError(t, err)
			lease, refusing = stated, true
			return nil
		})
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrNotHeld)
		assert.ErrorIs(t, err, errLostReply{})
		b.clock.Advance(3 * time.Second) // where a renewal would fall
		time.Sleep(10 * time.Millisecond)
		stated, perr := parseExpiry(b.value(t, "lock.k"))
		require.NoError(t, perr)
		assert.Equal(t, lease, stated, "no renewal after Do returned")
		b.clock.Advance(6 * time.Second) // the lease runs out: the keeper ends with it
	})
}

func TestDoRefusesANilFunctionAndWritesNothing(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		sent := record(client)
		err := b.lockerOn(t, client).Do(ctx, "lock.k", nil)
		require.ErrorIs(t, err, ErrInvalidArgument)
		assert.Empty(t, sent.names(), "nothing sent")
		err = b.lockerOn(t, client).Do(ctx, "", func(context.Context) error { return nil })
		require.ErrorIs(t, err, ErrInvalidArgument)
		assert.Empty(t, sent.names(), "nothing sent")
	})
}
