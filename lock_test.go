package setnxlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

var ctx = context.Background()

func TestUncontendedLockIsTakenWithSetnxAndReleased(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		sent := record(client)
		l := b.classicLockerOn(t, client)

		lock, err := l.TryAcquire(ctx, "lock.report")
		require.NoError(t, err)
		assert.Equal(t, "lock.report", lock.Key())
		assert.Equal(t, b.start.Add(10*time.Second), lock.ExpiresAt())
		assert.Equal(t, "SETNX WATCH GET MULTI PEXPIRE EXEC", sent.names(), "SETNX, then the safety net (H6), watched (H10)")

		stored := b.value(t, "lock.report")
		expiryMillis, token, _ := strings.Cut(stored, ":")
		assert.Equal(t, strconv.FormatInt(b.start.Add(10*time.Second).UnixMilli(), 10), expiryMillis)
		assert.GreaterOrEqual(t, len(token)*5, 128, "owner token must carry at least 128 random bits")

		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.report"))
		assert.Equal(t, "SETNX WATCH GET MULTI PEXPIRE EXEC WATCH GET ZRANGE MULTI DEL EXEC", sent.names())
	})
}

func TestLiveLeaseRefusesOthersAndIsLeftUntouched(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		before := b.value(t, "lock.k")

		b.clock.Advance(10*time.Second - time.Millisecond)
		_, err = b.locker(t).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, before, b.value(t, "lock.k"))
		require.NoError(t, holder.Release(ctx))
	})
}

func TestEveryTokenIsFresh(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t)
		seen := map[string]bool{}
		for range 50 {
			lock, err := l.TryAcquire(ctx, "lock.k")
			require.NoError(t, err)
			v := b.value(t, "lock.k")
			require.False(t, seen[v], "value %q written twice", v)
			seen[v] = true
			require.NoError(t, lock.Release(ctx))
		}
	})
}

// H3: a holder whose lease expired and was taken over must not delete the
// new holder's key when it finally calls Release.
func TestLateReleaseDoesNotTouchTheNextHolder(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		late, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		b.clock.Advance(10 * time.Second)
		next, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		nextValue := b.value(t, "lock.k")

		require.ErrorIs(t, late.Release(ctx), ErrNotHeld)
		assert.Equal(t, nextValue, b.value(t, "lock.k"))
		require.NoError(t, next.Release(ctx))
	})
}

// H3, checked beyond the lease arithmetic: even while our own clock still
// calls the lease live, Release deletes only our exact value.
func TestReleaseLeavesAValueThatIsNotOursAlone(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		lock, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		foreign := strconv.FormatInt(b.start.Add(time.Minute).UnixMilli(), 10)
		b.set(t, "lock.k", foreign)

		// While our lease is live a key no longer ours is taken for our
		// own earlier release whose reply was lost (H5): nil. Only a
		// ForceRelease leaves the trace that makes it ErrNotHeld.
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, foreign, b.value(t, "lock.k"))
	})
}

func TestReleaseAfterOwnExpiryCleansUpButReportsNotHeld(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		lock, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		b.clock.Advance(10 * time.Second)

		require.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "our own expired value is cleaned up")
	})
}

func TestReleaseTwiceReportsNotHeld(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t)
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
		again, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		require.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
		require.NoError(t, again.Release(ctx), "the second Release must not have touched the new lock")
	})
}

// Issue 11, finding 10: a refused acquisition returns a nil *Lock, and
// "defer lock.Release(ctx)" written before the error is checked is common.
// Every method of a nil Lock says it holds nothing instead of panicking:
// ErrNotHeld, or the zero value, and a Done that is already closed.
func TestANilLockHoldsNothingAndNeverPanics(t *testing.T) {
	b := newBackend(t, "miniredis", startMiniredis(t))
	_, err := b.locker(t).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	lock, err := b.locker(t).TryAcquire(ctx, "lock.k")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Nil(t, lock)

	assert.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
	assert.ErrorIs(t, lock.Refresh(ctx, time.Second), ErrNotHeld)
	assert.ErrorIs(t, lock.Err(), ErrNotHeld)
	assert.Equal(t, "", lock.Key())
	assert.True(t, lock.ExpiresAt().IsZero())
	assert.Zero(t, lock.FencingToken())
	assert.True(t, closed(lock.Done()), "a nil Lock is over")
	work := lock.Context(ctx)
	assert.ErrorIs(t, context.Cause(work), ErrNotHeld, "its context is cancelled from the start")
}

// H5: the server applies SETNX but the reply is lost. The next attempt finds
// our own token at the key and takes the lock instead of waiting out our own
// lease.
func TestLostSetnxReplyIsRecognisedOnTheNextAttempt(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		loseReply(client, "setnx")
		l := b.classicLockerOn(t, client)

		_, err := l.TryAcquire(ctx, "lock.k")
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrNotAcquired)
		written := b.value(t, "lock.k")

		b.clock.Advance(time.Second)
		require.Equal(t, time.Duration(-1), b.raw.PTTL(ctx, "lock.k").Val(), "no safety net yet: its PEXPIRE never went out")
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "our own SETNX must be recognised")
		assert.Equal(t, b.start.Add(10*time.Second), lock.ExpiresAt(), "the lease is the one we wrote")
		assert.Equal(t, written, b.value(t, "lock.k"))
		assert.Greater(t, b.raw.PTTL(ctx, "lock.k").Val(), time.Duration(0), "the recognised lease gets its safety net (H6)")
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// H5 through Acquire: the retry after the lost reply owns the lock at once.
func TestAcquireRecognisesItsOwnLostSetnx(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		loseReply(client, "setnx")
		l := b.lockerOn(t, client)

		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lock, err := l.Acquire(ctx, "lock.k") // the ManualClock never moves: waiting out the lease would time out
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
	})
}

// H5 inside one attempt: a client configured with retries resends a SETNX
// whose reply was lost; the resend answers 0 because the first copy created
// the key. The GET that follows finds the value of this very attempt.
func TestResentSetnxRecognisesItsFirstCopy(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		hookCommand(client, "setnx", func(send func() error) error {
			_ = send()    // applied; the reply is lost
			return send() // the client's retry: 0, the key exists
		})
		lock, err := b.lockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
	})
}

// A holder that stalls between sending SETNX and reading its reply past the
// whole lease must not be handed a Lock that is already over (H8 at
// acquire time): others may have taken it over meanwhile.
func TestALeaseThatEndedBeforeTheReplyIsNotGranted(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		hookCommand(client, "setnx", func(send func() error) error {
			err := send()
			b.clock.Advance(10 * time.Second) // the reply arrives a whole TTL later
			return err
		})
		_, err := b.classicLockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)

		other, err := b.classicLocker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "the stale value is expired and can be taken over")
		require.NoError(t, other.Release(ctx))
	})
}

// Another client's value is never claimed through the H5 memory.
func TestLostSetnxReplyDoesNotClaimAnotherClientsLock(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		client := b.client(t)
		loseReply(client, "setnx")
		l := b.lockerOn(t, client)

		_, err = l.TryAcquire(ctx, "lock.k") // SETNX applied as a no-op, reply lost
		require.Error(t, err)
		_, err = l.TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, holder.Release(ctx))
	})
}

// H5 for a takeover: the watched GETSET (or the takeover script) ran, so
// the lease is rightfully ours, but the reply was lost. The next attempt
// recognises our value. On every path.
func TestLostTakeoverReplyIsRecognisedOnTheNextAttempt(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		b.crashedHolder(t, "lock.k")
		client := b.client(t)
		if p.name == "scripts" {
			loseNthReply(client, "evalsha", 1) // the takeover's: the first step is SET NX PX GET
		} else {
			loseReply(client, "exec")
		}
		l := b.lockerOn(t, client, p.opt)
		warm(t, l)

		_, err := l.TryAcquire(ctx, "lock.k")
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrNotAcquired)
		written := b.value(t, "lock.k")

		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "our own takeover must be recognised")
		assert.Equal(t, written, b.value(t, "lock.k"))
		require.NoError(t, lock.Release(ctx))
	})
}

// "Missing: start over (bounded)": a key that vanishes between every SETNX
// and GET must not keep one attempt looping.
func TestStartingOverIsBounded(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		sent := record(client)
		live := strconv.FormatInt(b.start.Add(time.Minute).UnixMilli(), 10)
		hookCommand(client, "setnx", func(send func() error) error {
			b.set(t, "lock.k", live) // someone holds it as our SETNX arrives...
			return send()
		})
		hookCommand(client, "get", func(send func() error) error {
			require.NoError(t, b.raw.Del(context.Background(), "lock.k").Err()) // ...and releases before our GET
			return send()
		})

		_, err := b.classicLockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, strings.Repeat("SETNX GET ", maxStartOvers-1)+"SETNX GET", sent.names())
	})
}

func TestAcquireWaitsForTheHolderToRelease(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		released := make(chan struct{})
		releaseErr := make(chan error, 1)
		go func() {
			time.Sleep(20 * time.Millisecond)
			close(released)
			releaseErr <- holder.Release(ctx)
		}()
		// The holder's Release must return before the test ends and its
		// client closes, even when the waiter is quicker.
		defer func() { assert.NoError(t, await.Recv(t, releaseErr, "the holder's Release")) }()

		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lock, err := b.locker(t).Acquire(ctx, "lock.k")
		require.NoError(t, err)
		select {
		case <-released:
		default:
			t.Fatal("Acquire returned while the holder still held the lock")
		}
		require.NoError(t, lock.Release(ctx))
	})
}

func TestAcquireReturnsBothErrorsWhenItsContextEnds(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		before := b.value(t, "lock.k")

		deadline, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, err = b.locker(t).Acquire(deadline, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		cancelled, cancelNow := context.WithCancel(ctx)
		time.AfterFunc(10*time.Millisecond, cancelNow)
		_, err = b.locker(t).Acquire(cancelled, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, context.Canceled)

		assert.Equal(t, before, b.value(t, "lock.k"))
		require.NoError(t, holder.Release(ctx))
	})
}
