package setnxlock

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// jumpingClock is a Clock of a user's own: the local clock plus an offset
// that the test moves at once, as a stepped wall clock or a clock synced to
// some other source would.
type jumpingClock struct{ offset atomic.Int64 }

func (c *jumpingClock) Now() time.Time       { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *jumpingClock) jump(d time.Duration) { c.offset.Add(int64(d)) }

// L3 (issue 28): timers follow the clock they serve. A lease of an hour
// whose Locker's clock jumps past its end is over by that clock at once:
// Done closes then, not an hour later when a timer set at the start would
// have fired. The lock's key lives on the backend; the clock follows a
// miniredis whose TIME the test moves.
func TestTheLossIsSignalledOnTimeWhenAServerClockJumps(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		timeServer := startMiniredisServer(t)
		timeClient := redis.NewClient(&redis.Options{Addr: timeServer.Addr()})
		t.Cleanup(func() { _ = timeClient.Close() })
		clock, err := NewServerClock(ctx, timeClient, time.Hour)
		require.NoError(t, err)
		defer clock.Close()
		l, err := New(b.client(t), WithClock(clock), WithTTL(time.Hour))
		require.NoError(t, err)
		defer l.Close()
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		done := lock.Done()

		timeServer.SetTime(time.Now().Add(2 * time.Hour)) // the server's clock is stepped past the lease
		require.NoError(t, clock.measure(ctx))
		require.EqualValues(t, 1, clock.Steps(), "the step was not noticed")
		await.Recv(t, done, "Done closing once the clock passed the lease's end (a timer set at the start fires in an hour)")
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
	})
}

// The same with a Clock of the user's own, which does not say when it
// moves: waits on it read it again every clockRecheck.
func TestTheLossIsSignalledOnTimeWhenACustomClockJumps(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		clock := new(jumpingClock)
		l, err := New(b.client(t), WithClock(clock), WithTTL(time.Hour), WithAutoRefresh())
		require.NoError(t, err)
		defer l.Close()
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		clock.jump(2 * time.Hour)
		await.Recv(t, lock.Done(), "Done closing once the clock passed the lease's end (a timer set at the start fires in an hour)")
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
	})
}

// An abandoned wait is dropped: on a clock that does not say when it
// moves, at the next recheck; on a ServerClock, at the next measurement.
// Neither keeps a goroutine meanwhile (goleak checks the package).
func TestAnAbandonedWaitIsDropped(t *testing.T) {
	waiting := func(s *clockWaits, ch <-chan time.Time) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for w := range s.waits {
			if w.ch == ch {
				return true
			}
		}
		return false
	}

	custom := new(jumpingClock)
	abandon := make(chan struct{})
	ch := at(custom, custom.Now().Add(time.Hour), abandon)
	require.True(t, waiting(&polledWaits, ch))
	close(abandon)
	eventually(t, "the abandoned wait on a custom clock dropped", func() bool { return !waiting(&polledWaits, ch) })

	client := redis.NewClient(&redis.Options{Addr: startMiniredis(t)})
	t.Cleanup(func() { _ = client.Close() })
	server, err := NewServerClock(ctx, client, time.Hour)
	require.NoError(t, err)
	defer server.Close()
	abandon = make(chan struct{})
	ch = at(server, server.Now().Add(time.Hour), abandon)
	require.True(t, waiting(&server.waits, ch))
	close(abandon)
	require.NoError(t, server.measure(ctx))
	assert.False(t, waiting(&server.waits, ch), "the abandoned wait on a ServerClock dropped at the measurement")
	select {
	case <-ch:
		t.Fatal("an abandoned wait fired")
	default:
	}
}

// A clock set back past a wait's instant holds the wait back until the
// clock gets there again; a clock set forward fires it.
func TestAWaitFollowsItsClockBackAndForth(t *testing.T) {
	clock := new(jumpingClock)
	instant := clock.Now().Add(time.Hour)
	ch := at(clock, instant, nil)
	clock.jump(2 * time.Hour)
	fired := await.Recv(t, ch, "the wait firing once the clock jumped past its instant")
	assert.False(t, fired.Before(instant), "fired at %v, before its instant %v", fired, instant)

	ch = at(clock, clock.Now().Add(time.Hour), nil)
	clock.jump(-2 * time.Hour)
	polledWaits.recheck()
	select {
	case <-ch:
		t.Fatal("a wait fired while its clock was set back before its instant")
	default:
	}
	clock.jump(3 * time.Hour)
	await.Recv(t, ch, "the wait firing once the clock came forward past its instant again")
}
