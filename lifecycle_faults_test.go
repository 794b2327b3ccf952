package setnxlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// Scenarios from the review of the lease lifecycle: each failed before its
// fix.

// H6: a winner that stalls right after its SETNX (here in its Observer,
// equally a GC pause) past its lease must not end its successor's lease
// when its safety-net PEXPIRE finally goes out.
func TestAStalledWinnerCannotEndItsSuccessorsLease(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		entered, resume := make(chan struct{}), make(chan struct{})
		var once sync.Once
		stall := ObserverFunc(func(e Event) {
			if e.Kind == EventAcquired {
				once.Do(func() {
					close(entered)
					select { // not the test's goroutine: wait, but never fail here
					case <-resume:
					case <-time.After(await.Timeout):
					}
				})
			}
		})
		stalled := make(chan struct{})
		go func() {
			defer close(stalled)
			_, _ = b.locker(t, WithObserver(stall)).TryAcquire(ctx, "lock.k")
		}()
		await.Recv(t, entered, "the winner stalling after its SETNX")
		b.clock.Advance(21 * time.Second) // the stalled winner's lease is long over
		successor, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		close(resume)
		await.Recv(t, stalled, "the stalled acquisition's return")

		require.True(t, successor.ExpiresAt().After(b.clock.Now()))
		_, err = b.locker(t).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "the successor's key must survive")
		assert.Greater(t, b.raw.PTTL(ctx, "lock.k").Val(), 19*time.Second)
	})
}

// A Refresh that would shorten the lease loses its reply: the shorter end
// may be stored, so ExpiresAt must say so, and the watch must act on it.
func TestALostShorteningRefreshBelievesTheEarlierEnd(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		client := b.client(t)
		lock, err := b.lockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		done := lock.Done()
		loseReply(client, "exec")
		require.Error(t, lock.Refresh(ctx, 2*time.Second))
		assert.Equal(t, b.start.Add(2*time.Second), lock.ExpiresAt())

		b.clock.Advance(2 * time.Second)
		eventually(t, "lost when the shorter lease ran out", func() bool { return closed(done) })
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
	})
}

// The watch must follow a Refresh that moves the end of the lease earlier.
func TestDoneFollowsARefreshThatShortensTheLease(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		lock, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		done := lock.Done()
		require.NoError(t, lock.Refresh(ctx, time.Second))

		b.clock.Advance(time.Second)
		eventually(t, "lost at the new, earlier end", func() bool { return closed(done) })
	})
}

// Calling Release stops renewals even when it fails (here: an ended
// context, as with defer lock.Release(requestCtx)); the lease then runs out.
func TestAFailedReleaseStillStopsAutoRefresh(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		lock, err := b.locker(t, WithTTL(9*time.Second), WithAutoRefresh()).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		require.Error(t, lock.Release(cancelled))

		for range 2 { // where renewals would fall, were they still running
			b.clock.Advance(3 * time.Second)
			time.Sleep(10 * time.Millisecond)
		}
		assert.Equal(t, b.start.Add(9*time.Second), lock.ExpiresAt(), "no renewal after Release")
		b.clock.Advance(3 * time.Second)
		eventually(t, "the lease ran out unrenewed", func() bool { return closed(lock.Done()) })
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
		_, err = b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
	})
}

// H11: a Refresh in flight when the lease reaches its end does not hold
// the loss back: the lock is lost at that end, the Refresh says so, and
// the renewal Redis applies afterwards is freed, not believed.
func TestTheLossIsDeclaredAtTheLeaseEndUnderARefreshInFlight(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		client := b.client(t)
		lock, err := b.lockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		done := lock.Done()
		inFlight := gateBefore(t, client, "exec", 1)
		refreshed := make(chan error, 1)
		go func() { refreshed <- lock.Refresh(ctx, time.Minute) }()
		inFlight.wait(t)

		b.clock.Advance(10 * time.Second)
		await.Recv(t, done, "the loss, at the lease's end, with the renewal still in flight")
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
		require.ErrorIs(t, await.Recv(t, refreshed, "the Refresh, at the lease's end"), ErrNotHeld)

		inFlight.pass() // Redis applies the renewal now, too late to count
		eventually(t, "the late renewal's value freed", func() bool { return b.value(t, "lock.k") == "<missing>" })
		assert.ErrorIs(t, lock.Refresh(ctx, time.Minute), ErrNotHeld, "once lost, always lost")
		assert.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
	})
}

// Release honours its context while a renewal is in flight.
func TestReleaseHonoursItsContextDuringARenewal(t *testing.T) {
	b := newBackend(t, "miniredis", startMiniredis(t))
	client := b.client(t)
	inRenewal, slowDone := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hookCommand(client, "exec", func(send func() error) error {
		once.Do(func() { // a renewal stuck on the network, until the test ends it
			close(inRenewal)
			select {
			case <-slowDone:
			case <-time.After(await.Timeout):
			}
		})
		return send()
	})
	lock, err := b.lockerOn(t, client, WithTTL(9*time.Second), WithAutoRefresh()).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	b.clock.Advance(3 * time.Second)
	await.Recv(t, inRenewal, "the renewal reaching the network")

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, lock.Release(short), context.DeadlineExceeded)
	close(slowDone)
	require.NoError(t, lock.Release(ctx))
	noLockGoroutineLeft(t)
}

func TestServerClockCloseIsSafeConcurrentlyAndDoesNotWait(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: startMiniredis(t)})
	t.Cleanup(func() { _ = client.Close() })
	for range 200 {
		c, err := NewServerClock(ctx, client, time.Hour)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); _ = c.Close() }()
		}
		await.Group(t, &wg, "concurrent Closes")
	}

	c, err := NewServerClock(ctx, client, 5*time.Millisecond)
	require.NoError(t, err)
	inTime, slowDone := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hookCommand(client, "time", func(send func() error) error {
		once.Do(func() { close(inTime) })
		select { // a server that takes its time
		case <-slowDone:
		case <-time.After(5 * time.Second):
		}
		return send()
	})
	await.Recv(t, inTime, "the TIME sample in flight")
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("Close waited for a measurement in flight")
	}
	close(slowDone)
}

// Once a lock has been reported lost, it stays lost: Refresh refuses
// without a round trip, even if the key still holds our value.
func TestARefreshAfterALossIsRefused(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		client := b.client(t)
		sent := record(client)
		lock, err := b.lockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		done := lock.Done()
		b.clock.Advance(10 * time.Second)
		eventually(t, "lost", func() bool { return closed(done) })

		b.clock.Advance(-time.Second) // even with the clock set back
		sent.reset()
		require.ErrorIs(t, lock.Refresh(ctx, time.Minute), ErrNotHeld)
		assert.Empty(t, sent.names())
	})
}
