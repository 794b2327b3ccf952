package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/faultproxy"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// Several keys at once (acquiremany.go, group.go, groupwait.go): all of
// them or none, one lease, one token, on every path and backend.

// groupValues returns what each key holds ("<missing>" when absent).
func (b *backend) groupValues(t testing.TB, keys ...string) []string {
	t.Helper()
	values := make([]string, len(keys))
	for i, key := range keys {
		values[i] = b.value(t, key)
	}
	return values
}

func allMissing(n int) []string {
	values := make([]string, n)
	for i := range values {
		values[i] = "<missing>"
	}
	return values
}

func TestAcquireManyIsAllOrNone(t *testing.T) {
	keys := []string{"m.a", "m.b", "m.c"}
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		single, group := b.locker(t, p.opt), b.locker(t, p.opt)
		held, err := single.TryAcquire(ctx, "m.b")
		require.NoError(t, err)
		heldValue := b.value(t, "m.b")

		_, err = group.TryAcquireMany(ctx, keys...)
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.Contains(t, err.Error(), `"m.b"`, "the error names the key held")
		assert.Equal(t, []string{"<missing>", heldValue, "<missing>"}, b.groupValues(t, keys...), "nothing written to any key")

		require.NoError(t, held.Release(ctx))
		lock, err := group.TryAcquireMany(ctx, keys...)
		require.NoError(t, err)
		assert.Equal(t, "m.a", lock.Key())
		assert.Equal(t, keys, lock.Keys())
		lock.Keys()[0] = "changed"
		assert.Equal(t, keys, lock.Keys(), "Keys is a copy")
		values := b.groupValues(t, keys...)
		assert.NotEqual(t, "<missing>", values[0])
		assert.Equal(t, []string{values[0], values[0], values[0]}, values, "one value on every key")
		for _, key := range keys {
			ttl := b.raw.PTTL(ctx, key).Val()
			assert.Greater(t, ttl, 10*time.Second, "%s: the safety net is past the lease (H6)", key)
		}

		_, err = single.TryAcquire(ctx, "m.c")
		require.ErrorIs(t, err, ErrNotAcquired, "a member is held for single-key lockers too")

		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, allMissing(3), b.groupValues(t, keys...), "Release deletes every key")
		assert.Equal(t, []string{"lock.k"}, mustLock(t, single, "lock.k").Keys(), "a single lock's Keys is its key")
	})
}

func mustLock(t *testing.T, l *Locker, key string) *Lock {
	t.Helper()
	lock, err := l.TryAcquire(ctx, key)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}

// A crashed holder's member is taken over with the free keys, in the same
// transaction; a live one is not, by any clock short of its end (H4).
func TestAcquireManyTakesOverExpiredMembers(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt)
		crashed, err := b.locker(t, p.opt).TryAcquire(ctx, "m.b")
		require.NoError(t, err)
		crashedValue := b.value(t, "m.b")

		b.clock.Set(crashed.ExpiresAt().Add(-time.Millisecond))
		_, err = l.TryAcquireMany(ctx, "m.a", "m.b")
		require.ErrorIs(t, err, ErrNotAcquired, "a lease not yet over is not taken over")
		assert.Equal(t, []string{"<missing>", crashedValue}, b.groupValues(t, "m.a", "m.b"))

		b.crashedHolder(t, "m.c") // moves the clock to the end of m.c's lease, past m.b's
		lock, err := l.TryAcquireMany(ctx, "m.a", "m.b", "m.c")
		require.NoError(t, err, "expired members are taken over")
		values := b.groupValues(t, "m.a", "m.b", "m.c")
		assert.NotEqual(t, crashedValue, values[1])
		assert.Equal(t, []string{values[0], values[0], values[0]}, values)
		assert.Equal(t, tokenOf(values[0]), lock.token)
		require.NoError(t, lock.Release(ctx))
		require.ErrorIs(t, crashed.Release(ctx), ErrNotHeld, "the crashed holder's late release touches nothing")

		// A crashed group: each member is a classic lock value, which a
		// single-key locker takes over once the group's lease is over.
		group, err := b.locker(t, p.opt).TryAcquireMany(ctx, "m.a", "m.b")
		require.NoError(t, err)
		_, err = l.TryAcquire(ctx, "m.b")
		require.ErrorIs(t, err, ErrNotAcquired)
		b.clock.Set(group.ExpiresAt())
		single, err := l.TryAcquire(ctx, "m.b")
		require.NoError(t, err, "a crashed group's member is taken over alone")
		require.NoError(t, single.Release(ctx))
		again, err := l.TryAcquireMany(ctx, "m.b", "m.a")
		require.NoError(t, err, "and the rest of it with a group")
		require.NoError(t, again.Release(ctx))
	})
}

// A server or proxy that accepts WATCH and ignores it breaks a group's
// takeover as it breaks one key's: a member taken over by someone else
// between the group's read and its EXEC would be overwritten. The page's
// check on each GETSET's old value catches it (H2): the group puts the
// winner's value back, leaves none of its own, and reports
// ErrWatchIgnored, which AcquireMany does not retry.
func TestAGroupOnAServerThatIgnoresWatchIsDetected(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.crashedHolder(t, "m.b") // the group takes m.b over: its GETSETs, not MSETNX
		client := b.client(t)
		client.AddHook(watchIgnored{})
		checked := gateAfter(t, client, "get", 1) // the GETs of the would-be watch
		groupDone := make(chan error, 1)
		go func() { _, err := b.lockerOn(t, client).TryAcquireMany(ctx, "m.a", "m.b"); groupDone <- err }()
		checked.wait(t)

		winner, err := b.locker(t).TryAcquire(ctx, "m.b")
		require.NoError(t, err, "a single-key locker takes the expired member first")
		winnersValue := b.value(t, "m.b")
		checked.pass()

		require.ErrorIs(t, await.Recv(t, groupDone, "the group's TryAcquireMany"), ErrWatchIgnored)
		assert.Equal(t, []string{"<missing>", winnersValue}, b.groupValues(t, "m.a", "m.b"),
			"the winner's value put back, and nothing of the group's left")
		require.NoError(t, winner.Release(ctx))
	})
}

// The classic clients' bare timestamps: the group writes one bare value
// to every key, and releases and renews only that exact value (H3).
func TestGroupInABareFormat(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt, WithFormat(UnixSeconds))
		lock, err := l.TryAcquireMany(ctx, "m.a", "m.b")
		require.NoError(t, err)
		values := b.groupValues(t, "m.a", "m.b")
		assert.Equal(t, strconv.FormatInt(b.start.Add(11*time.Second).Unix(), 10), values[0], "the page's now + timeout + 1")
		assert.Equal(t, values[0], values[1])
		b.clock.Advance(2 * time.Second)
		require.NoError(t, lock.Refresh(ctx, 10*time.Second))
		renewed := b.groupValues(t, "m.a", "m.b")
		assert.NotEqual(t, values, renewed)
		assert.Equal(t, renewed[0], renewed[1])
		require.NoError(t, b.raw.Set(ctx, "m.b", values[0], 0).Err()) // an older value, as another client's would be
		require.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
		assert.Equal(t, []string{"<missing>", values[0]}, b.groupValues(t, "m.a", "m.b"), "only our exact value deleted")
	})
}

// H7: a member that holds anything but a lock value refuses the group and
// is left as it was; a key of another type too, which MGET would read as
// missing and MSET overwrite.
func TestAcquireManyLeavesForeignValuesUntouched(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt)
		require.NoError(t, b.raw.RPush(ctx, "m.list", "x").Err())
		_, err := l.TryAcquireMany(ctx, "m.a", "m.list")
		require.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, "list", b.raw.Type(ctx, "m.list").Val())
		assert.Equal(t, "<missing>", b.value(t, "m.a"))

		require.NoError(t, b.raw.Set(ctx, "m.garbage", "not a lock", 0).Err())
		_, err = l.AcquireMany(await.Context(t), "m.a", "m.garbage")
		require.ErrorIs(t, err, ErrNotLockValue, "not retried")
		assert.Equal(t, []string{"<missing>", "not a lock"}, b.groupValues(t, "m.a", "m.garbage"))
	})
}

func TestAcquireManyRefusesBadInputWritingNothing(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t, WithFencing())
		for _, keys := range [][]string{
			nil,
			{""},
			{"m.a", ""},
			{"m.a", "m.b", "m.a"},
			{"m.a", FenceKey("m.a")},
			{waitersKey("m.a")},
			{"m.a", releasedKey("m.b")},
		} {
			_, err := l.TryAcquireMany(ctx, keys...)
			require.ErrorIs(t, err, ErrInvalidArgument, "%q", keys)
			_, err = l.AcquireMany(await.Context(t), keys...)
			require.ErrorIs(t, err, ErrInvalidArgument, "%q", keys)
		}
		assert.Zero(t, b.raw.DBSize(ctx).Val(), "nothing written")
	})
}

// Groups over the same keys, in opposite orders, under contention: every
// one finishes (no deadlock), and a key never has two holders.
func TestAcquireManyInOppositeOrdersNeverDeadlocksOrOverlaps(t *testing.T) {
	const workers, cycles = 6, 10
	groups := [][]string{{"m.a", "m.b", "m.c"}, {"m.c", "m.b", "m.a"}, {"m.b", "m.a"}, {"m.c", "m.a"}}
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holders := map[string]*atomic.Int32{}
		for _, key := range groups[0] {
			holders[key] = new(atomic.Int32)
		}
		var overlaps, done atomic.Int32
		waitCtx := await.Context(t)
		var wg sync.WaitGroup
		for w := range workers {
			l := b.locker(t, p.opt, WithClock(systemClock{}), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
			keys := groups[w%len(groups)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range cycles {
					lock, err := l.AcquireMany(waitCtx, keys...)
					if !assert.NoError(t, err) {
						return
					}
					for _, key := range keys {
						if holders[key].Add(1) != 1 {
							overlaps.Add(1)
						}
					}
					time.Sleep(100 * time.Microsecond)
					for _, key := range keys {
						holders[key].Add(-1)
					}
					if !assert.NoError(t, lock.Release(waitCtx)) {
						return
					}
					done.Add(1)
				}
			}()
		}
		await.Group(t, &wg, "the groups' workers (a deadlock, or a wait never woken)")
		assert.Zero(t, overlaps.Load(), "two holders of one key at once")
		assert.Equal(t, int32(workers*cycles), done.Load())
	})
}

// Mixed with single-key lockers of the default path, which queue on a
// member key: a group's release frees the key rather than hand it, and the
// queued waiter is not stranded; the group's wait is woken by the
// single holder's release.
func TestAcquireManyAndQueuedWaitersWakeEachOther(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt)
		group, err := l.TryAcquireMany(ctx, "m.a", "m.b")
		require.NoError(t, err)
		waiter := b.locker(t, p.opt)
		got := make(chan *Lock, 1)
		go func() {
			lock, err := waiter.Acquire(await.Context(t), "m.b")
			assert.NoError(t, err)
			got <- lock
		}()
		// Let the waiter find the key held (and queue, where it does).
		require.Eventually(t, func() bool {
			return b.raw.Exists(ctx, waitersKey("m.b")).Val() == 1 || p.name != "scripts"
		}, 5*time.Second, time.Millisecond, "the waiter did not queue")
		require.NoError(t, group.Release(ctx))
		single := await.Recv(t, got, "the queued waiter after the group's release")
		require.NotNil(t, single)

		waiting := make(chan struct{})
		var once sync.Once
		groupWaiter := b.locker(t, p.opt, WithObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventWaiting {
				once.Do(func() { close(waiting) })
			}
		})))
		waited := make(chan error, 1)
		go func() {
			lock, err := groupWaiter.AcquireMany(await.Context(t), "m.a", "m.b")
			if err == nil {
				err = lock.Release(ctx)
			}
			waited <- err
		}()
		await.Recv(t, waiting, "the group waiting on m.b")
		require.NoError(t, single.Release(ctx))
		require.NoError(t, await.Recv(t, waited, "the group's wait after the single holder's release"))
	})
}

func TestAcquireManyEndsWithItsContext(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t)
		held, err := b.locker(t).TryAcquire(ctx, "m.b")
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, err = l.AcquireMany(waitCtx, "m.a", "m.b")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, "<missing>", b.value(t, "m.a"))
		require.NoError(t, held.Release(ctx))
	})
}

// A group is renewed all or nothing: one member taken by someone else and
// the lock is lost, Done closes, and no member is renewed.
func TestGroupRefreshIsAllOrNothing(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt)
		lock, err := l.TryAcquireMany(ctx, "m.a", "m.b", "m.c")
		require.NoError(t, err)
		require.NoError(t, lock.Refresh(ctx, 20*time.Second))
		renewed := b.value(t, "m.a")
		assert.Equal(t, []string{renewed, renewed, renewed}, b.groupValues(t, "m.a", "m.b", "m.c"), "every key renewed")
		assert.Equal(t, b.start.Add(20*time.Second), lock.ExpiresAt())

		require.NoError(t, b.raw.Del(ctx, "m.c").Err()) // as if broken, then taken by another
		other, err := b.locker(t, p.opt).TryAcquire(ctx, "m.c")
		require.NoError(t, err)
		foreign := b.value(t, "m.c")

		err = lock.Refresh(ctx, 30*time.Second)
		require.ErrorIs(t, err, ErrNotHeld)
		await.Recv(t, lock.Done(), "Done after the group was lost")
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
		assert.Equal(t, []string{renewed, renewed, foreign}, b.groupValues(t, "m.a", "m.b", "m.c"), "nothing renewed")

		err = lock.Release(ctx)
		require.ErrorIs(t, err, ErrNotHeld)
		assert.Equal(t, []string{"<missing>", "<missing>", foreign}, b.groupValues(t, "m.a", "m.b", "m.c"), "only our members deleted")
		require.NoError(t, other.Release(ctx))
	})
}

// The keeper renews every key, and ends the lock when one is lost.
func TestGroupAutoRefreshRenewsEveryKeyAndEndsOnALostOne(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t, WithClock(systemClock{}), WithTTL(300*time.Millisecond), WithAutoRefresh())
		lock, err := l.TryAcquireMany(ctx, "m.a", "m.b")
		require.NoError(t, err)
		first := b.value(t, "m.a")
		require.Eventually(t, func() bool { return b.value(t, "m.a") != first }, 5*time.Second, 5*time.Millisecond, "no renewal")
		assert.Nil(t, lock.Err())
		values := b.groupValues(t, "m.a", "m.b")
		if values[0] == values[1] || values[1] == first { // renewed between the two reads
			values = b.groupValues(t, "m.a", "m.b")
		}
		assert.Equal(t, tokenOf(values[0]), tokenOf(values[1]), "both keys ours")

		require.NoError(t, b.raw.Set(ctx, "m.b", fmt.Sprintf("%d:someoneelse0123456789abcdef01234567", time.Now().Add(time.Hour).UnixMilli()), 0).Err())
		await.Recv(t, lock.Done(), "Done once a renewal found m.b not ours")
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
		require.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
	})
}

func TestGroupReleaseDeletesOnlyOurMembers(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt)
		lock, err := l.TryAcquireMany(ctx, "m.a", "m.b")
		require.NoError(t, err)
		foreign := fmt.Sprintf("%d:someoneelse0123456789abcdef01234567", b.start.Add(time.Hour).UnixMilli())
		require.NoError(t, b.raw.Set(ctx, "m.b", foreign, 0).Err())
		require.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
		assert.Equal(t, []string{"<missing>", foreign}, b.groupValues(t, "m.a", "m.b"))

		again, err := l.TryAcquireMany(ctx, "m.c", "m.d")
		require.NoError(t, err)
		require.NoError(t, b.raw.Del(ctx, "m.d").Err()) // as our own earlier release whose reply was lost (H5)
		require.NoError(t, again.Release(ctx), "a member gone while our lease is live is taken for our own release")
		require.ErrorIs(t, again.Release(ctx), ErrNotHeld, "released once")
	})
}

// With fencing the group's one token is greater than every earlier token
// of each key, and every later token of any key greater than the group's.
func TestGroupFencingTokenOrdersWithEachKey(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt, WithFencing())
		var last int64
		for range 3 {
			lock, err := l.TryAcquire(ctx, "m.a")
			require.NoError(t, err)
			last = lock.FencingToken()
			require.NoError(t, lock.Release(ctx))
		}
		lockB, err := l.TryAcquire(ctx, "m.b")
		require.NoError(t, err)
		require.NoError(t, lockB.Release(ctx))

		group, err := l.TryAcquireMany(ctx, "m.b", "m.a")
		require.NoError(t, err)
		assert.Greater(t, group.FencingToken(), last, "above m.a's earlier tokens")
		assert.Greater(t, group.FencingToken(), lockB.FencingToken(), "above m.b's")
		require.NoError(t, group.Release(ctx))
		for _, key := range []string{"m.a", "m.b"} {
			later, err := l.TryAcquire(ctx, key)
			require.NoError(t, err)
			assert.Greater(t, later.FencingToken(), group.FencingToken(), "%s: a later token exceeds the group's", key)
			require.NoError(t, later.Release(ctx))
		}

		require.NoError(t, b.raw.Set(ctx, FenceKey("m.z"), "not a number", 0).Err())
		_, err = l.TryAcquireMany(ctx, "m.y", "m.z")
		require.ErrorIs(t, err, ErrNotLockValue, "a counter that is not one (H7)")
		assert.Equal(t, "<missing>", b.value(t, "m.y"))
		assert.Equal(t, "not a number", b.value(t, FenceKey("m.z")))
	})
}

// A lost EXEC reply (H5): the transaction is atomic, so the group's keys
// are all ours or all free, never some; the write nobody was granted is
// deleted at once, and the keys are free for the next attempt. A release
// whose EXEC reply is lost deleted every key, and its retry learns it.
func TestGroupIsAllOrNoneUnderALostExecReply(t *testing.T) {
	keys := []string{"m.a", "m.b", "m.c"}
	onEachBackend(t, func(t *testing.T, b *backend) {
		px := faultproxy.Start(t, b.addr)
		l := b.classicLockerOn(t, b.clientThrough(t, px))
		other := b.locker(t)

		// The first EXEC is the Locker's empty check of MULTI
		// (checkTransactions); the second is the group's.
		px.LoseReplies(func(command string, nth int) bool { return command == "exec" && nth == 2 })
		_, err := l.TryAcquireMany(ctx, keys...)
		require.Error(t, err)
		require.Equal(t, 3, px.Count("exec"), "the EXEC is not resent; the undo's runs")
		assert.Equal(t, allMissing(3), b.groupValues(t, keys...), "the write nobody was granted is undone, whole")

		px.LoseReplies(nil)
		lock, err := l.TryAcquireMany(ctx, keys...)
		require.NoError(t, err)
		_, err = other.TryAcquire(ctx, "m.c")
		require.ErrorIs(t, err, ErrNotAcquired)

		px.LoseReplies(func(command string, nth int) bool { return command == "exec" && nth == 5 })
		require.Error(t, lock.Release(ctx))
		assert.Equal(t, allMissing(3), b.groupValues(t, keys...), "the release applied to every key")
		require.NoError(t, lock.Release(ctx), "the retried Release learns it is done")
	})
}

// H5 when the undo fails too: the group's value stays on its keys, and
// the next attempt at a group recognises it instead of waiting it out; an
// AcquireMany that gives up deletes it.
func TestGroupRecognisesItsLostWriteWhoseUndoFailed(t *testing.T) {
	keys := []string{"m.a", "m.b"}
	onEachBackend(t, func(t *testing.T, b *backend) {
		px := faultproxy.Start(t, b.addr)
		l := b.classicLockerOn(t, b.clientThrough(t, px))
		// The group's EXEC (after the Locker's empty check of MULTI), and
		// the GETs after the group's own two: the undo's.
		px.LoseReplies(func(command string, nth int) bool {
			return command == "exec" && nth == 2 || command == "get" && nth > 2
		})
		_, err := l.TryAcquireMany(ctx, keys...)
		require.Error(t, err)
		ours := b.value(t, "m.a")
		require.NotEqual(t, "<missing>", ours, "the EXEC applied")
		assert.Equal(t, []string{ours, ours}, b.groupValues(t, keys...))
		_, err = b.locker(t).TryAcquire(ctx, "m.b")
		require.ErrorIs(t, err, ErrNotAcquired, "held for everyone else")

		px.LoseReplies(nil)
		lock, err := l.TryAcquireMany(ctx, keys...)
		require.NoError(t, err, "our own lost write is recognised")
		require.NotEqual(t, ours, b.value(t, "m.a"), "and overwritten, under the watch")
		require.NoError(t, lock.Release(ctx))

		execs, gets := px.Count("exec"), px.Count("get")
		px.LoseReplies(func(command string, nth int) bool {
			return command == "exec" && nth == execs+1 || command == "get" && nth > gets+2
		})
		_, err = l.TryAcquireMany(ctx, keys...)
		require.Error(t, err)
		ours = b.value(t, "m.a")
		require.Equal(t, []string{ours, ours}, b.groupValues(t, keys...), "lost again, undo failed again")
		px.LoseReplies(nil)
		ended, cancel := context.WithCancel(ctx)
		cancel()
		_, err = l.AcquireMany(ended, keys...)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, allMissing(2), b.groupValues(t, keys...), "an AcquireMany that gives up deletes the write nobody will claim")
	})
}

// The slot a Cluster hashes a key to: CRC16/XMODEM's check value, and
// CLUSTER KEYSLOT's answers (the Cluster scenario asks a real one).
func TestKeySlotIsRedisClusters(t *testing.T) {
	assert.Equal(t, uint16(0x31C3), crc16("123456789"))
	for key, slot := range map[string]int{
		"foo": 12182, "bar": 5061, "somekey": 11058, "hello": 866,
		"{user1000}.following": keySlot("user1000"), "{}x": keySlot("{}x"), "a{}{b}": keySlot("a{}{b}"),
		"{b}{a}": keySlot("b"),
	} {
		assert.Equal(t, slot, keySlot(key), key)
	}
	assert.NotEqual(t, keySlot("{}x"), keySlot("x"), "an empty tag is no tag")
	for _, key := range []string{"lock.report", "{user42}.lock", "a{b}c{d}", "odd{}key", "open{only", "lock:{}:{x}:y", "{}{real}.lock2", ""} {
		assert.EqualValues(t, clusterSlot(key), keySlot(key), "%q: as fencing_test.go's independent clusterSlot", key)
	}
}

// A Cluster client refuses keys in different slots before anything is
// written, and locks keys of one slot on its master.
func clusterGroup(t *testing.T, c *clusterBackend) {
	l := c.locker(t, WithFencing())
	for _, key := range []string{"foo", "bar", "{g}x", "user.42", "{user.42}.lock"} {
		assert.EqualValues(t, c.slot(t, key), keySlot(key), key)
	}
	_, err := l.TryAcquireMany(ctx, "foo", "bar")
	require.ErrorIs(t, err, ErrCrossSlot)
	require.ErrorIs(t, err, ErrInvalidArgument)
	for _, key := range []string{"foo", "bar"} {
		v, _ := c.onNode(t, key)
		assert.Equal(t, "<missing>", v, "nothing written to %s", key)
	}

	_, err = l.TryAcquireMany(ctx, "x}y")
	require.ErrorIs(t, err, ErrCrossSlot, "a key whose fence counter is in another slot (FenceKey)")

	keys := []string{"{order7}.stock", "{order7}.payment"}
	lock, err := l.TryAcquireMany(ctx, keys...)
	require.NoError(t, err)
	assert.Positive(t, lock.FencingToken())
	v0, node0 := c.onNode(t, keys[0])
	v1, node1 := c.onNode(t, keys[1])
	assert.Equal(t, v0, v1)
	assert.Equal(t, node0, node1)
	require.NoError(t, lock.Refresh(ctx, 20*time.Second))
	_, err = l.TryAcquireMany(ctx, keys[1], keys[0])
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, lock.Release(ctx))
	v0, _ = c.onNode(t, keys[0])
	assert.Equal(t, "<missing>", v0)
	again, err := l.AcquireMany(await.Context(t), keys...)
	require.NoError(t, err)
	require.NoError(t, again.Release(ctx))
}

// WithReplicas: a group is granted once the replica has every key, and a
// renewal once it has every renewed key; on a server without replicas the
// group is undone, whole, and AcquireMany says why it never got it (H9).
func TestGroupWithReplicas(t *testing.T) {
	r := startReplicated(t)
	keys := []string{"m.rep.a", "m.rep.b"}
	lock, err := r.locker(t).TryAcquireMany(ctx, keys...)
	require.NoError(t, err)
	for _, key := range keys {
		assert.Equal(t, lock.value, r.onReplicaValue(t, key), "the replica had %s when the group was granted", key)
	}
	r.clock.Advance(time.Second)
	require.NoError(t, lock.Refresh(ctx, 10*time.Second))
	for _, key := range keys {
		assert.Equal(t, lock.value, r.onReplicaValue(t, key), "and each renewal of %s", key)
	}
	require.NoError(t, lock.Release(ctx))

	b := newBackend(t, "redis-server", redistest.Start(t).Addr()) // no replicas
	l := b.locker(t, WithReplicas(1, 20*time.Millisecond))
	_, err = l.TryAcquireMany(ctx, keys...)
	require.ErrorIs(t, err, ErrNotReplicated)
	assert.Equal(t, allMissing(2), b.groupValues(t, keys...), "the group is not left behind")
	waitCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = l.AcquireMany(waitCtx, keys...)
	assert.ErrorIs(t, err, ErrNotAcquired)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, ErrNotReplicated, "AcquireMany says why it never got the group")
	assert.Equal(t, allMissing(2), b.groupValues(t, keys...))
}

// Groups and single-key lockers on the same keys, on every path, with
// holders that crash now and then (their leases run out and are taken
// over, one key or a group at a time): never two holders of a key, each
// counted only while its own lease is live (H8).
func TestGroupsAndSingleKeysWithCrashesNeverOverlap(t *testing.T) {
	const workers, cycles = 6, 8
	keys := []string{"m.a", "m.b", "m.c"}
	wants := [][]string{{"m.a", "m.b", "m.c"}, {"m.c", "m.a"}, {"m.b"}, {"m.c", "m.b"}, {"m.a"}, {"m.c"}}
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		sections := map[string]*criticalSection{}
		for _, key := range keys {
			sections[key] = &criticalSection{}
		}
		waitCtx := await.Context(t)
		var wg sync.WaitGroup
		var crashes atomic.Int32
		for w := range workers {
			l := b.locker(t, p.opt, WithClock(systemClock{}), WithTTL(150*time.Millisecond), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
			want := wants[w]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for cycle := range cycles {
					var lock *Lock
					var err error
					if len(want) == 1 {
						lock, err = l.Acquire(waitCtx, want[0])
					} else {
						lock, err = l.AcquireMany(waitCtx, want...)
					}
					if !assert.NoError(t, err) {
						return
					}
					body := func() { time.Sleep(200 * time.Microsecond) }
					for _, key := range lock.Keys() {
						inner, cs := body, sections[key]
						body = func() { cs.hold(lock, systemClock{}, inner) }
					}
					body()
					if (w+cycle)%5 == 4 {
						crashes.Add(1)
						continue // the holder dies: its lease must run out first
					}
					err = lock.Release(waitCtx)
					if errors.Is(err, ErrNotHeld) && expired(lock.ExpiresAt(), time.Now()) {
						continue // it overran its lease: not counted (H8)
					}
					if !assert.NoError(t, err) {
						return
					}
				}
			}()
		}
		await.Group(t, &wg, "the workers (a group or a key never freed)")
		for _, key := range keys {
			counted, overran := sections[key].counted()
			assert.LessOrEqual(t, sections[key].most(), 1, "%s: two holders at once", key)
			assert.Positive(t, counted, key)
			t.Logf("%s: %d sections, %d overran", key, counted, overran)
		}
		t.Logf("%d holders crashed", crashes.Load())
	})
}
