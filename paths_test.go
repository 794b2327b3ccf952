package setnxlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/faultproxy"
)

// lockPath is one way a Locker talks to Redis (path.go), chosen by the
// option users choose it with. The behaviour is the same on all of them;
// only the commands and round trips differ.
type lockPath struct {
	name string
	opt  Option
	// acquire is the command that carries an unqueued attempt's SETNX,
	// the one a lost reply hides.
	acquire string
}

// asIs adds nothing to the harness's Locker, which takes the default path.
var asIs Option = func(*config) error { return nil }

var paths = []lockPath{
	{"scripts", asIs, "set"}, // SET NX PX GET (setget.go)
	{"commands", WithoutScripts(), "set"},
	{"classic", WithClassicCommands(), "setnx"},
}

// onEachPath runs the scenario on every path and every backend.
func onEachPath(t *testing.T, scenario func(t *testing.T, b *backend, p lockPath)) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) { scenario(t, b, p) })
		})
	}
}

// warm loads the library's scripts into the server, so that the next
// EVALSHA of each runs the script rather than answering NOSCRIPT (and
// being sent again as EVAL).
func warm(t *testing.T, l *Locker) {
	t.Helper()
	for _, script := range []interface {
		Load(context.Context, redis.Scripter) *redis.StringCmd
	}{acquireScript, queuedScript, claimScript, releaseScript, leaveScript, takeoverScript} {
		require.NoError(t, script.Load(ctx, l.client).Err())
	}
}

// The round trips each path takes for an uncontended cycle, and that each
// sets the safety net (H6) with the lease.
func TestEachPathTakesItsRoundTrips(t *testing.T) {
	want := map[string][2]string{
		"scripts":  {"SET", "EVALSHA"},
		"commands": {"SET", "WATCH GET ZRANGE MULTI DEL EXEC"},
		"classic":  {"SETNX WATCH GET MULTI PEXPIRE EXEC", "WATCH GET ZRANGE MULTI DEL EXEC"},
	}
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		client := b.client(t)
		l := b.lockerOn(t, client, p.opt, WithExpiryGrace(5*time.Second))
		warm(t, l)
		sent := record(client)

		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		assert.Equal(t, want[p.name][0], sent.names())
		assert.Equal(t, 15*time.Second, b.raw.PTTL(ctx, "lock.k").Val().Round(time.Second), "lease + grace")

		sent.reset()
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, want[p.name][1], sent.names())
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// H1, H3 and fencing on every path: a live lease refuses, an expired one
// is taken over with increasing tokens, and the late holder's Release
// leaves the successor alone.
func TestEveryPathRefusesTakesOverAndReleasesOnlyItsOwn(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		for _, format := range []Format{TokenFormat, UnixMillis} {
			key := "lock." + format.String()
			first, err := b.locker(t, p.opt, WithFencing(), WithFormat(format)).TryAcquire(ctx, key)
			require.NoError(t, err)
			other := b.locker(t, p.opt, WithFencing(), WithFormat(format))
			_, err = other.TryAcquire(ctx, key)
			require.ErrorIs(t, err, ErrNotAcquired)

			b.clock.Set(first.ExpiresAt())
			second, err := other.TryAcquire(ctx, key)
			require.NoError(t, err)
			assert.Greater(t, second.FencingToken(), first.FencingToken())
			successor := b.value(t, key)

			require.ErrorIs(t, first.Release(ctx), ErrNotHeld)
			assert.Equal(t, successor, b.value(t, key), "the late release left the successor alone")
			require.NoError(t, second.Release(ctx))
			assert.Equal(t, "<missing>", b.value(t, key))
		}
	})
}

// H5 on every path: the reply of the command that created the key is lost;
// the next attempt recognises the lease as ours.
func TestEveryPathRecognisesItsLostAcquireReply(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		client := b.client(t)
		l := b.lockerOn(t, client, p.opt)
		warm(t, l)
		loseReply(client, p.acquire)

		_, err := l.TryAcquire(ctx, "lock.k")
		require.Error(t, err)
		require.NotEqual(t, "<missing>", b.value(t, "lock.k"), "the write was applied")
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "our own lease, recognised")
		require.NoError(t, lock.Release(ctx))
	})
}

// H3 and H5 on release: a release whose reply was lost deleted the key; the
// retry reports success, and a later holder's key is never touched.
func TestEveryPathRetriesALostReleaseSafely(t *testing.T) {
	release := map[string]string{"scripts": "evalsha", "commands": "exec", "classic": "exec"}
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		client := b.client(t)
		l := b.lockerOn(t, client, p.opt)
		warm(t, l)
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		loseReply(client, release[p.name])

		require.Error(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "the release was applied")
		next, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		successor := b.value(t, "lock.k")

		require.NoError(t, lock.Release(ctx), "deleted by the attempt whose reply was lost")
		assert.Equal(t, successor, b.value(t, "lock.k"), "the retry left the next holder alone")
		require.NoError(t, next.Release(ctx))
	})
}

// H7 on every path: garbage and keys of other types are reported and left
// untouched.
func TestEveryPathLeavesForeignValuesAlone(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt)
		b.set(t, "lock.garbage", "not a lock")
		_, err := l.TryAcquire(ctx, "lock.garbage")
		require.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, "not a lock", b.value(t, "lock.garbage"))

		require.NoError(t, b.raw.RPush(ctx, "lock.list", "a").Err())
		_, err = l.TryAcquire(ctx, "lock.list")
		require.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, []string{"a"}, b.raw.LRange(ctx, "lock.list", 0, -1).Val())
	})
}

// A release wakes the waiter: with a minute of backoff and a clock that
// never moves, the waiter could only get in by polling after its backoff or
// the holder's 10s lease, long after its 5s deadline.
func TestReleaseWakesAWaiterAtOnce(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holder, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		waiter := b.locker(t, p.opt, WithBackoff(time.Minute, time.Minute), WithObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventContended {
				go func() { _ = holder.Release(ctx) }() // released while the waiter is about to sleep
			}
		})))
		deadline, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lock, err := waiter.Acquire(deadline, "lock.k")
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
	})
}

// No lost wake-up: a release that lands after the refused attempt but
// before the subscription is caught by the attempt the waiter makes right
// after subscribing.
func TestAReleaseBeforeTheSubscriptionIsNotMissed(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t, paths[0].opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		var contended atomic.Int32
		waiter := b.locker(t, paths[0].opt, WithBackoff(time.Minute, time.Minute), WithObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventContended && contended.Add(1) == 1 {
				require.NoError(t, holder.Release(ctx)) // synchronously: before Acquire subscribes
			}
		})))
		deadline, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lock, err := waiter.Acquire(deadline, "lock.k")
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
	})
}

// Nothing blocks a wait: a waiter woken by pub/sub (it does not queue:
// fencing, command-only, classic) whose SUBSCRIBE confirmation is lost (a
// half-open connection) used to sit in the subscription until its timeout
// (2s by default; the chaos harness saw a free key wait 296ms for it). The
// subscription is now made in the background and the wait polls meanwhile,
// so it takes the key once it is released, with the confirmation an hour
// away.
func TestAWaitPollsWhileItsSubscriptionIsConfirmed(t *testing.T) {
	patient := func(c *config) error { c.subscribeTimeout = time.Hour; return nil }
	for _, kind := range []struct {
		name string
		opt  Option
	}{{"fencing", WithFencing()}, {"commands", WithoutScripts()}, {"classic", WithClassicCommands()}} {
		t.Run(kind.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				p := faultproxy.Start(t, b.addr)
				l := b.lockerOn(t, b.clientThrough(t, p), kind.opt, patient, WithBackoff(time.Millisecond, 10*time.Millisecond))
				holder, err := b.locker(t, kind.opt).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				p.LoseReplies(func(command string, nth int) bool { return command == "subscribe" })
				waitCtx, cancel := context.WithCancel(ctx) // no deadline: only the key ends the wait
				t.Cleanup(cancel)
				result := make(chan error, 1)
				go func() {
					lock, err := l.Acquire(waitCtx, "lock.k")
					if err == nil {
						err = lock.Release(ctx)
					}
					result <- err
				}()
				require.Eventually(t, func() bool { return p.Count("subscribe") == 1 }, 5*time.Second, time.Millisecond, "the wait subscribing")

				require.NoError(t, holder.Release(ctx))
				require.NoError(t, await.Recv(t, result, "the wait's Acquire once the key was released, its subscription unconfirmed"))
			})
		})
	}
}

// Mutual exclusion on every path, with real time, wake-ups and several
// Lockers contending for one key.
func TestEveryPathKeepsMutualExclusionUnderContention(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		waitCtx := await.Context(t)
		var inside, most atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			l := b.locker(t, p.opt, WithClock(systemClock{}), WithTTL(5*time.Second), WithBackoff(time.Millisecond, 20*time.Millisecond))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 25 {
					lock, err := l.Acquire(waitCtx, "lock.k")
					if !assert.NoError(t, err) {
						return
					}
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(100 * time.Microsecond)
					inside.Add(-1)
					assert.NoError(t, lock.Release(ctx))
				}
			}()
		}
		await.Group(t, &wg, "the contending workers")
		assert.Equal(t, int32(1), most.Load(), "holders inside the critical section at once")
	})
}
