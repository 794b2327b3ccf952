package setnxlock

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// scripted is the scripts path, on which Lockers queue and hand over,
// with every release handing the key over in order (a starvation threshold
// of 0): the tests that use it are about the handoff itself, and with a
// ManualClock that stands still no waiter would ever have waited long
// enough for the default threshold. Adaptive barging, the default, has
// tests of its own (barging_test.go), and the stress tests and the chaos
// harness run the default.
var scripted = inOrder(paths[0].opt)

// inOrder is opt with every release handing over in order.
func inOrder(opt Option) Option {
	return func(c *config) error {
		if err := opt(c); err != nil {
			return err
		}
		return WithStarvationThreshold(0)(c)
	}
}

// barging, after a queueing path's option, restores the default starvation
// threshold: a release frees the key and wakes the first waiter, which has
// waited nothing by a clock that stands still.
var barging = WithStarvationThreshold(DefaultStarvationThreshold)

// queueingPaths are the paths on which Lockers queue and hand over, each
// handing over in order: the scripts, and the commands of WithoutScripts
// and WithClassicCommands (commandqueue.go).
var queueingPaths = []lockPath{
	{"scripts", scripted, "evalsha"},
	{"commands", inOrder(paths[1].opt), "set"},
	{"classic", inOrder(paths[2].opt), "setnx"},
}

// onEachQueueingPath runs the scenario on every queueing path and every
// backend, with the path's option.
func onEachQueueingPath(t *testing.T, scenario func(t *testing.T, b *backend, path Option)) {
	for _, p := range queueingPaths {
		t.Run(p.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) { scenario(t, b, p.opt) })
		})
	}
}

// onEachQueueingPathOf is onEachQueueingPath on one backend of start's,
// for what only one backend can do (ACL users: a real redis-server).
func onEachQueueingPathOf(t *testing.T, start func(t *testing.T) *backend, scenario func(t *testing.T, b *backend, path Option)) {
	for _, p := range queueingPaths {
		t.Run(p.name, func(t *testing.T) { scenario(t, start(t), p.opt) })
	}
}

// queued waits until key's queue holds n members and returns them.
func (b *backend) queued(t *testing.T, key string, n int) []string {
	t.Helper()
	return b.queuedWhere(t, key, n, b.queuedNow)
}

// queuedInLine waits until key's queue holds n members that are places in
// line, not the listeners of waits on wake-ups (formatListener), and
// returns them.
func (b *backend) queuedInLine(t *testing.T, key string, n int) []string {
	t.Helper()
	return b.queuedWhere(t, key, n, func(key string) []string {
		var inLine []string
		for _, member := range b.queuedNow(key) {
			if token, listener := strings.CutSuffix(member, queueSeparator); !listener || strings.Contains(token, queueSeparator) {
				inLine = append(inLine, member)
			}
		}
		return inLine
	})
}

func (b *backend) queuedWhere(t *testing.T, key string, n int, read func(key string) []string) []string {
	t.Helper()
	var members []string
	require.Eventually(t, func() bool {
		members = read(key)
		return len(members) == n
	}, 5*time.Second, time.Millisecond, "waiters queued on %q", key)
	return members
}

// queuedNow returns key's queue, first in line first.
func (b *backend) queuedNow(key string) []string {
	return b.raw.ZRange(ctx, waitersKey(key), 0, -1).Val()
}

// entryToken is the token of a queue entry "<Locker id>:<token>".
func entryToken(entry string) string { return entry[strings.LastIndexByte(entry, ':')+1:] }

// acquireInBackground starts Acquire of key and returns where its result
// will arrive.
//
// A Lock handed over is held before its claim is confirmed (heard.go); the
// Lock this sends is one whose claim has returned (its turn is free again),
// so that tests of what follows the claim read its outcome.
func acquireInBackground(t *testing.T, l *Locker, key string) <-chan *Lock {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	t.Cleanup(cancel)
	acquired := make(chan *Lock, 1)
	go func() {
		lock, err := l.Acquire(waitCtx, key)
		assert.NoError(t, err)
		claimSettled(lock)
		acquired <- lock
	}()
	return acquired
}

// claimSettled waits, at most 5s, until the claim of a Lock handed over
// has returned (its turn is free again), so that a test reads the Lock's
// value as the claim left it.
func claimSettled(lock *Lock) {
	if lock == nil {
		return
	}
	waitCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if lock.lockOp(waitCtx, "await the claim") == nil {
		lock.unlockOp()
	}
}

// A release hands the key to the first queued waiter: the key goes from
// one holder's value straight to the next's, with no DEL in between for a
// third client to barge into, and waiters are served in the order they
// queued. The waiter holds a lease of its own clock's, written when it
// claimed the key. With scripts the release is one round trip; with the
// commands two (WATCH with GET and the head of the queue, then MULTI/EXEC,
// the PUBLISH last).
func TestAReleaseHandsTheKeyToQueuedWaitersInOrder(t *testing.T) {
	release := map[string]string{
		"scripts":  "EVALSHA",
		"commands": "WATCH GET ZRANGE MULTI ZREM SET PEXPIRE PUBLISH EXEC",
		"classic":  "WATCH GET ZRANGE MULTI ZREM SET PEXPIRE PUBLISH EXEC",
	}
	for _, p := range queueingPaths {
		t.Run(p.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				holderClient := b.client(t)
				holderLocker := b.lockerOn(t, holderClient, p.opt)
				warm(t, holderLocker)
				holder, err := holderLocker.TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				first := acquireInBackground(t, b.locker(t, p.opt), "lock.k")
				b.queued(t, "lock.k", 1)
				second := acquireInBackground(t, b.locker(t, p.opt), "lock.k")
				entries := b.queued(t, "lock.k", 2)

				sent := record(holderClient)
				require.NoError(t, holder.Release(ctx))
				assert.Equal(t, release[p.name], sent.names())
				assert.Equal(t, entryToken(entries[0]), tokenOf(b.value(t, "lock.k")), "the key went straight to the first waiter")
				lock := await.Recv(t, first, "the first waiter's Acquire")
				require.NotNil(t, lock)
				assert.Equal(t, entryToken(entries[0]), lock.token, "the first to queue is served first")
				assert.Equal(t, lock.value, b.value(t, "lock.k"), "the waiter claimed the key with its own value")
				assert.Equal(t, entries[1:], b.queuedNow("lock.k"), "the first waiter is off the queue")
				assert.True(t, b.clock.Now().Add(10*time.Second).Equal(lock.ExpiresAt()), "the lease counts from the claim, by the waiter's clock")
				_, err = b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
				require.ErrorIs(t, err, ErrNotAcquired, "nobody barges in")

				require.NoError(t, lock.Release(ctx))
				next := await.Recv(t, second, "the second waiter's Acquire")
				require.NotNil(t, next)
				assert.Equal(t, next.value, b.value(t, "lock.k"))
				require.NoError(t, next.Release(ctx))
				assert.Equal(t, "<missing>", b.value(t, "lock.k"), "the last release deletes the key")
				assert.Zero(t, b.raw.Exists(ctx, waitersKey("lock.k")).Val(), "and the queue is gone")
			})
		})
	}
}

// A queue entry whose Locker no longer listens (its process died) is
// skipped at no cost: handing it the key would leave the key to a dead
// waiter.
func TestAReleaseSkipsWaitersNobodyListensFor(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		l := b.locker(t, path)
		holder, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		dead := newToken() + ":" + newToken()
		require.NoError(t, b.raw.ZAdd(ctx, waitersKey("lock.k"), redis.Z{Score: 1, Member: dead}).Err())
		require.NoError(t, holder.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "released, not handed to the dead waiter")
		assert.Empty(t, b.queuedNow("lock.k"), "and the dead entry is gone")
	})
}

// A waiter whose context ends leaves the queue; if a release handed it the
// key in the meantime (after its wait ended: its Locker drops the handoff,
// before its leave), the leave hands the key on, or deletes it when nobody
// else waits, instead of leaving it held for the claim window. The next
// waiter gets it with the clock standing still.
func TestAWaiterThatGivesUpLeavesTheQueueAndHandsOnALateHandoff(t *testing.T) {
	for _, tc := range []struct {
		name       string
		next, lose bool // another waiter in line; the leave's reply is lost (H5)
	}{
		{"nobody else waits", false, false},
		{"to the next in line", true, false},
		{"to the next in line, the leave's reply lost", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
				holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				client := b.client(t)
				leaving := gateStep(t, client, stepLeave)
				lost := new(atomic.Bool)
				if tc.lose {
					lost = loseStepReply(client, stepLeave)
				}
				l := b.lockerOn(t, client, path)
				warm(t, l)
				quitCtx, quit := context.WithCancel(ctx)
				t.Cleanup(quit)
				gaveUp := make(chan error, 1)
				go func() { _, err := l.Acquire(quitCtx, "lock.k"); gaveUp <- err }()
				entry := b.queued(t, "lock.k", 1)[0]
				next := make(chan *Lock, 1)
				if tc.next {
					nextLocker, nextCtx := b.locker(t, path), await.Context(t)
					go func() {
						lock, _ := nextLocker.Acquire(nextCtx, "lock.k") // its error, if any, is the assertions' below
						claimSettled(lock)
						next <- lock
					}()
					b.queued(t, "lock.k", 2)
				}
				quit()
				leaving.wait(t)

				require.NoError(t, holder.Release(ctx))
				require.Equal(t, entryToken(entry), tokenOf(b.value(t, "lock.k")), "handed to the wait that gave up")
				leaving.pass()
				require.ErrorIs(t, await.Recv(t, gaveUp, "the Acquire whose context ended"), ErrNotAcquired)
				require.Equal(t, tc.lose, lost.Load(), "the leave's reply lost")
				require.NotEqual(t, entryToken(entry), tokenOf(b.value(t, "lock.k")), "the leave hands on the key handed to it")
				if !tc.next {
					assert.Equal(t, "<missing>", b.value(t, "lock.k"), "deleted: nobody else waits")
					return
				}
				lock := await.Recv(t, next, "the next waiter's Acquire")
				require.NotNil(t, lock)
				assert.Empty(t, b.queuedNow("lock.k"))
				require.NoError(t, lock.Release(ctx))
			})
		})
	}
}

// A handoff whose message never arrives (a subscription that dropped) is
// found by the waiter's next poll: the key carries its token, and it
// claims the key.
func TestAWaiterFindsAHandoffWhoseMessageWasLost(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		_, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		acquired := acquireInBackground(t, b.locker(t, path), "lock.k")
		entry := b.queued(t, "lock.k", 1)[0]

		// What a release's handoff writes, without its PUBLISH.
		handed := formatValue(b.clock.Now().Add(claimWindow), entryToken(entry), "")
		require.NoError(t, b.raw.ZRem(ctx, waitersKey("lock.k"), entry).Err())
		require.NoError(t, b.raw.Set(ctx, "lock.k", handed, claimWindow).Err())
		lock := await.Recv(t, acquired, "the waiter's Acquire")
		require.NotNil(t, lock)
		assert.Equal(t, entryToken(entry), lock.token)
		assert.Equal(t, lock.value, b.value(t, "lock.k"), "claimed with its own lease")
		assert.True(t, b.clock.Now().Add(10*time.Second).Equal(lock.ExpiresAt()))
		assert.Empty(t, b.queuedNow("lock.k"), "it does not queue again")
		require.NoError(t, lock.Release(ctx))
	})
}

// A waiter that wins the key outside the queue (the holder's lease ran
// out and it took it over) takes its entry off the queue, so that no
// release hands it a second lease.
func TestAWaiterThatTakesOverLeavesTheQueue(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		crashed, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		acquired := acquireInBackground(t, b.locker(t, path), "lock.k")
		b.queued(t, "lock.k", 1)
		b.clock.Set(crashed.ExpiresAt().Add(time.Millisecond))
		lock := await.Recv(t, acquired, "the waiter's Acquire")
		require.NotNil(t, lock)
		assert.Empty(t, b.queuedNow("lock.k"))
		require.NoError(t, lock.Release(ctx))
	})
}

// Locker.Close ends the subscription a waiter opened at once, rather than
// handoffLinger after; the Locker can still wait later.
func TestCloseEndsTheHandoffSubscription(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		l := b.locker(t, path)
		acquired := acquireInBackground(t, l, "lock.k")
		channel := channelOf(b.queued(t, "lock.k", 1)[0])
		require.NoError(t, holder.Release(ctx))
		require.NotNil(t, await.Recv(t, acquired, "the waiter's Acquire"))
		assert.EqualValues(t, 1, b.raw.PubSubNumSub(ctx, channel).Val()[channel], "lingering")
		require.NoError(t, l.Close())
		// The server drops the subscription once it sees the connection close.
		require.Eventually(t, func() bool { return b.raw.PubSubNumSub(ctx, channel).Val()[channel] == 0 }, handoffLinger/3, time.Millisecond, "closed before the linger ends")
	})
}

// channelOf is the handoff channel of a queue entry's Locker.
func channelOf(entry string) string {
	return handoffChannelPrefix + entry[:strings.LastIndexByte(entry, ':')]
}

// Waiters of one Locker share its subscription and are told apart by
// token; once the Locker listens, a new waiter queues with its very first
// attempt instead of being refused once first.
func TestWaitersOfOneLockerShareItsSubscription(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		client := b.client(t)
		l := b.lockerOn(t, client, path)
		warm(t, l)
		first := acquireInBackground(t, l, "lock.k")
		channel := channelOf(b.queued(t, "lock.k", 1)[0])
		sent := record(client)
		second := acquireInBackground(t, l, "lock.k")
		b.queued(t, "lock.k", 2)
		assert.True(t, onlyQueuedAttempts(sent), "the second waiter queued with its first attempt: %s (%s)", sent.names(), sent.scriptsRun())
		assert.EqualValues(t, 1, b.raw.PubSubNumSub(ctx, channel).Val()[channel], "one subscription")

		require.NoError(t, holder.Release(ctx))
		lock := await.Recv(t, first, "the first waiter's Acquire")
		require.NotNil(t, lock)
		require.NoError(t, lock.Release(ctx))
		next := await.Recv(t, second, "the second waiter's Acquire")
		require.NotNil(t, next)
		require.NoError(t, next.Release(ctx))
	})
}

// onlyQueuedAttempts reports whether the attempts recorded, one at least,
// were all queued ones: queued.lua and never acquire.lua on the scripts;
// on the commands, SET NX (or SETNX) whose GET reads the queue with it.
func onlyQueuedAttempts(sent *recorder) bool {
	if scripts := sent.scriptsRun(); scripts != "" {
		return !strings.Contains(scripts, "acquire")
	}
	names := strings.Fields(sent.names())
	reads := 0
	for i, name := range names {
		if name == "GET" {
			if i+1 == len(names) || names[i+1] != "ZSCORE" {
				return false
			}
			reads++
		}
	}
	return reads > 0
}

// A handoff written after its waiter has left the queue, by a release
// that read the queue before the leave (its WATCH should have aborted it;
// miniredis v2.40's WATCH misses a ZREM that leaves other members, and a
// late copy of a release's write arrives whenever it does), is declined:
// the waiter's Locker hands the key on at once, instead of leaving the
// provisional value to block the key for the claim window. With a
// ManualClock that does not move, that window would never end.
func TestAHandoffWrittenAfterItsWaiterLeftIsHandedOn(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		l := b.locker(t, path)
		quitCtx, quit := context.WithCancel(ctx)
		gaveUp := make(chan error, 1)
		go func() { _, err := l.Acquire(quitCtx, "lock.k"); gaveUp <- err }()
		entry := b.queued(t, "lock.k", 1)[0]
		quit()
		require.ErrorIs(t, await.Recv(t, gaveUp, "the Acquire whose context ended"), ErrNotAcquired)
		require.Empty(t, b.queuedNow("lock.k"), "the wait left the queue")

		// The stale release: the holder's key handed to the entry that left,
		// written, then announced, as a release's hand-on does.
		lockerID, token, ok := parseEntry(entry)
		require.True(t, ok)
		now := b.clock.Now()
		require.NoError(t, b.raw.Set(ctx, "lock.k", provisionalValue(now, token), 0).Err())
		require.NoError(t, b.raw.Publish(ctx, handoffChannel(lockerID), formatPayload(token, provisionalEnd(now), "lock.k")).Err())
		holder.Orphan() // its key is gone: it must not renew or release anything

		require.Eventually(t, func() bool { return b.value(t, "lock.k") == "<missing>" }, 5*time.Second, time.Millisecond,
			"the handoff to the wait that left was not handed on: %q", b.value(t, "lock.k"))
	})
}
