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

// The scenarios of an independent review of the command-only queue
// (commandqueue.go) and adaptive barging (issue 15), each with the
// hazard or invariant it breaks. Each failed on the code before its fix.

// unheardHandoff makes the next handoff a client sends in a MULTI/EXEC
// unheard (its PUBLISH goes to a channel nobody listens on: the waiter's
// Locker is between two connections of its subscription, say), and then
// holds the client after that EXEC's reply until the test passes the gate.
type unheardHandoff struct {
	armed atomic.Bool
	gate  *gate
}

func (u *unheardHandoff) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (u *unheardHandoff) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (u *unheardHandoff) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "multi" || !u.armed.Load() {
			return next(ctx, cmds)
		}
		rewritten := false
		for _, cmd := range cmds {
			if args := cmd.Args(); cmd.Name() == "publish" && len(args) == 3 {
				if ch, _ := args[1].(string); strings.HasPrefix(ch, handoffChannelPrefix) {
					args[1] = handoffChannelPrefix + "nobody"
					rewritten = true
				}
			}
		}
		err := next(ctx, cmds)
		if rewritten && u.armed.CompareAndSwap(true, false) {
			close(u.gate.arrived)
			<-u.gate.open // bounded: the test passes it, or its cleanup does
		}
		return err
	}
}

// F1. A handoff nobody heard is handed on by a second watched transaction
// that recognises the key by the entry's token alone. Between the two
// transactions the waiter, alive (only its subscription was down), finds
// its token at its next poll and claims the key with a lease of its own,
// which carries the same token: the releaser's hand-on then takes the
// waiter's live lease (deletes it here, or hands it to the next waiter).
// The gap between the handoff and its hand-on is the command transport's
// (release.lua hands on within the one script), so the releaser is on the
// commands; the waiter is on every queueing path.
func TestAnUnheardHandoffIsNotHandedOnAfterTheWaiterClaimedIt(t *testing.T) {
	for _, releaser := range queueingPaths[1:] {
		t.Run("released on "+releaser.name, func(t *testing.T) {
			onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
				anUnheardHandoffClaimedByAPoll(t, b, releaser.opt, []Option{path}, func(lock *Lock, provisional string) {})
			})
		})
	}
}

// X1 (issue 23): F1 again, across the transports. A command-path releaser
// hands the key to a waiter with P = (now+claimWindow).0:<token>, and nobody
// hears it. The waiter's poll claims the key with a lease of its TTL by
// its clock: with a TTL of claimWindow and the clocks together, that lease
// is the very value P. The releaser's hand-on of its unheard handoff
// recognises P by exact equality and takes the waiter's live lease. A
// claim never writes the value it found, on either transport (queue.go):
// the waiter is on every queueing path.
func TestAClaimNeverWritesTheProvisionalValueItFound(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		anUnheardHandoffClaimedByAPoll(t, b, queueingPaths[1].opt, []Option{path, WithTTL(claimWindow)}, func(lock *Lock, provisional string) {
			handed, err := parseExpiry(provisional)
			require.NoError(t, err)
			require.Equal(t, handed.UnixMilli(), lock.ExpiresAt().UnixMilli(), "the schedule: the waiter's own lease states P's end")
		})
	})
}

// anUnheardHandoffClaimedByAPoll: a releaser on releaserPath hands lock.k
// to a waiter with waiterOpts and nobody hears it; the waiter's poll claims
// the key, and schedule checks its lease against the provisional value
// found. Then the releaser goes on to hand on its unheard handoff: it must
// leave the waiter's live lease alone.
func anUnheardHandoffClaimedByAPoll(t *testing.T, b *backend, releaserPath Option, waiterOpts []Option, schedule func(lock *Lock, provisional string)) {
	t.Helper()
	releaserClient := b.client(t)
	u := &unheardHandoff{gate: &gate{arrived: make(chan struct{}), open: make(chan struct{})}}
	t.Cleanup(u.gate.pass)
	releaserClient.AddHook(u)
	holder, err := b.lockerOn(t, releaserClient, releaserPath).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	waiter := acquireInBackground(t, b.locker(t, waiterOpts...), "lock.k")
	entry := b.queued(t, "lock.k", 1)[0]

	u.armed.Store(true)
	released := make(chan error, 1)
	go func() { released <- holder.Release(ctx) }()
	u.gate.wait(t) // the handoff is written, and nobody heard it
	provisional := b.value(t, "lock.k")
	lock := await.Recv(t, waiter, "the waiter's Acquire, by its poll")
	require.NotNil(t, lock)
	assert.Equal(t, entryToken(entry), lock.token)
	schedule(lock, provisional)
	require.Equal(t, lock.value, b.value(t, "lock.k"), "the waiter holds the key with the value it claimed")

	u.gate.pass()
	require.NoError(t, await.Recv(t, released, "the release"))
	assert.Equal(t, lock.value, b.value(t, "lock.k"), "the releaser's hand-on must not take the waiter's live lease")
	_, err = b.locker(t, waiterOpts...).TryAcquire(ctx, "lock.k")
	assert.ErrorIs(t, err, ErrNotAcquired, "a second holder while the waiter holds")
}

// failZRemOnce makes a client's next ZREM sent alone, once armed, fail
// unsent, as on a connection that broke (or a context that ended) between
// a queued attempt's win and the removal of its entry.
type failZRemOnce struct{ armed atomic.Bool }

func (f *failZRemOnce) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failZRemOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "zrem" && f.armed.CompareAndSwap(true, false) {
			err := errors.New("injected: connection reset before ZREM was sent")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (f *failZRemOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// gateLoneZRange stops a client, once armed, before its next ZRANGE sent
// alone (wakeHead's), until the test passes the gate.
type gateLoneZRange struct {
	armed atomic.Bool
	gate  *gate
}

func (g *gateLoneZRange) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gateLoneZRange) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "zrange" && g.armed.CompareAndSwap(true, false) {
			close(g.gate.arrived)
			<-g.gate.open // bounded: the test passes it, or its cleanup does
		}
		return next(ctx, cmd)
	}
}
func (g *gateLoneZRange) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// F2 is the command transport's own: a queued win there is SET NX, and
// taking the entry off the queue a ZREM of its own that may fail; a leave
// reads the key and wakes the head in round trips of their own. On the
// scripts the win takes the entry off in the same script (queued.lua), and
// the leave reads and wakes in one (leave.lua), so neither schedule exists.
//
// F2. A queued attempt that wins by SET NX and then fails to take its
// entry off the queue (dequeue: a broken connection, or simply Acquire's
// context ending right then) records the entry as abandoned, although the
// wait holds a live lease carrying that entry's token. The next message
// routed to that token (here: the wake-up of another waiter's leave, whose
// GET saw the key free just before the win) makes the Locker "leave" for
// the entry: the leave finds the key carrying the token and hands the
// holder's live lease on (or deletes it).
func TestAWinWhoseDequeueFailedIsNotHandedOnByAWakeUp(t *testing.T) {
	winThenWakeStaleEntry(t, func(t *testing.T, c *redis.Client, w func() *stalledWait) func() {
		zremFails := &failZRemOnce{}
		c.AddHook(zremFails)
		return func() { zremFails.armed.Store(true) }
	})
}

// F2, with no fault at all: Acquire's context ends just as its SET NX wins
// (a deadline), and Acquire still returns the Lock. The dequeue's ZREM runs
// on a context of its own (grantWin), so no stale entry is left for the
// wake-up to reach (TestAWinAtTheEndOfItsContextTakesItsEntryOffTheQueue);
// were it sent on the ended context, it would fail as the fault above does.
func TestAWinAtTheEndOfItsContextIsNotHandedOnByAWakeUp(t *testing.T) {
	winThenWakeStaleEntry(t, func(t *testing.T, c *redis.Client, w func() *stalledWait) func() {
		h := &cancelAfterWin{waiter: w}
		c.AddHook(h)
		return func() { h.armed.Store(true) }
	})
}

// cancelAfterWin ends the wait's context, once armed, right after its SET
// NX or SETNX won the key.
type cancelAfterWin struct {
	armed  atomic.Bool
	waiter func() *stalledWait
}

func (h *cancelAfterWin) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cancelAfterWin) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		won := false
		switch cmd := cmd.(type) {
		case *redis.StatusCmd:
			won = cmd.Name() == "set" && cmd.Val() == "OK"
		case *redis.IntCmd:
			won = cmd.Name() == "setnx" && cmd.Val() == 1
		}
		if won && h.armed.CompareAndSwap(true, false) {
			h.waiter().giveUp()
		}
		return err
	}
}
func (h *cancelAfterWin) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// winThenWakeStaleEntry: the first waiter wins the key while removing its
// entry fails (fault, armed by the func it returns), and another waiter's
// leave then wakes the stale entry.
func winThenWakeStaleEntry(t *testing.T, fault func(t *testing.T, c *redis.Client, w func() *stalledWait) func()) {
	for _, p := range paths[1:] { // the default threshold: releases let the first waiter barge
		t.Run(p.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				holder, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)

				firstClient := b.client(t)
				var first *stalledWait
				arm := fault(t, firstClient, func() *stalledWait { return first })
				first = stalledWaiterOn(t, b, firstClient, "lock.k", p.opt)
				b.queued(t, "lock.k", 1)
				first.stall.armed.Store(true)

				nextClient := b.client(t)
				wakeGate := &gateLoneZRange{gate: &gate{arrived: make(chan struct{}), open: make(chan struct{})}}
				t.Cleanup(wakeGate.gate.pass)
				nextClient.AddHook(wakeGate)
				next := stalledWaiterOn(t, b, nextClient, "lock.k", p.opt)
				b.queued(t, "lock.k", 2)
				next.stall.armed.Store(true)

				require.NoError(t, holder.Release(ctx)) // frees the key, wakes the first in line
				await.Recv(t, first.stall.arrived, "the first waiter's attempt after its wake-up")
				await.Recv(t, next.stall.arrived, "the next waiter's poll")

				// The next waiter gives up: its leave sees the key free and
				// is about to wake the first in line.
				wakeGate.armed.Store(true)
				next.giveUp()
				wakeGate.gate.wait(t)

				// Meanwhile the first waiter takes the free key; removing its
				// entry fails.
				arm()
				first.stall.pass()
				lock := await.Recv(t, first.acquired, "the first waiter's Acquire")
				require.Equal(t, lock.value, b.value(t, "lock.k"))

				wakeGate.gate.pass() // the leave's wake-up reaches the stale entry
				await.Recv(t, next.failed, "the next waiter giving up")
				deadline := time.Now().Add(time.Second)
				for time.Now().Before(deadline) && b.value(t, "lock.k") == lock.value {
					time.Sleep(10 * time.Millisecond)
				}
				assert.Equal(t, lock.value, b.value(t, "lock.k"), "the holder's live lease was handed on by a wake-up to its old entry")
				_, err = b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
				assert.ErrorIs(t, err, ErrNotAcquired, "a second holder while the first waiter holds")
			})
		})
	}
}

// F3. WithStarvationThreshold(0) promises that every release hands the key
// over in order, and a leave hands the key on "whatever the next waiter's
// wait". Both test now - score < barge, which with barge 0 still holds
// when the waiter's clock runs ahead of the releaser's (skew, or a score
// bumped to last+1 behind such a waiter): the key is freed and the waiter
// only woken, so anyone barges in. Here the waiter's clock is 5ms ahead.
func TestAThresholdOfZeroHandsOverWhateverTheClocks(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		ahead := NewManualClock(b.start.Add(5 * time.Millisecond))
		waiter := stalledWaiter(t, b, "lock.k", path, WithClock(ahead))
		entries := b.queued(t, "lock.k", 1)
		waiter.stall.armed.Store(true)

		require.NoError(t, holder.Release(ctx))
		assert.Contains(t, b.value(t, "lock.k"), ":"+entryToken(entries[0]), "a threshold of 0 hands the key to the first in line")
		waiter.stall.pass()
		lock := await.Recv(t, waiter.acquired, "the waiter's Acquire")
		require.NoError(t, lock.Release(ctx))
	})
}

// queueTouched plays the queued waiters' re-polls: before each MULTI/EXEC
// the client sends, and before its release's script, PEXPIRE on key's
// queue, as enqueue (and queued.lua) sends at every re-poll of a queued
// waiter, since the queue's PTTL is below the waiter's net from the first
// millisecond on.
type queueTouched struct {
	raw *redis.Client
	key string
	net time.Duration
}

func (q queueTouched) DialHook(next redis.DialHook) redis.DialHook { return next }
func (q queueTouched) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if stepHandoff.sentBy([]redis.Cmder{cmd}) {
			_ = q.raw.PExpire(ctx, waitersKey(q.key), q.net).Err()
		}
		return next(ctx, cmd)
	}
}
func (q queueTouched) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 2 && cmds[0].Name() == "multi" {
			_ = q.raw.PExpire(ctx, waitersKey(q.key), q.net).Err()
		}
		return next(ctx, cmds)
	}
}

// F4. The command-path release WATCHes the queue as well as the key, and
// every queued waiter's re-poll (every announcedPoll) rewrites the queue's
// expiry: with a few dozen waiters and a round trip of a millisecond or
// two, the release's transaction is aborted again and again, and after
// maxTransactionAttempts the Release fails (the Lock in doubt, the key
// held until its lease ends), although nothing relevant changed.
func TestAReleaseIsNotFailedByWaitersRefreshingTheQueue(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		client := b.client(t)
		client.AddHook(queueTouched{raw: b.raw, key: "lock.k", net: 20 * time.Second})
		l := b.lockerOn(t, client, path)
		warm(t, l)
		holder, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		waiter := stalledWaiter(t, b, "lock.k", path)
		b.queued(t, "lock.k", 1)

		assert.NoError(t, holder.Release(ctx), "a refresh of the queue's expiry is no reason to fail a release")
		select {
		case lock := <-waiter.acquired:
			require.NoError(t, lock.Release(ctx))
		case <-time.After(time.Second):
			t.Error("the waiter did not get the key within a second of the release")
		}
	})
}

// F5. H7 at Release: a lock whose key was replaced by a key of another
// type is not ours. The scripts (release.lua) and the non-queueing
// commands (compareAndWrite) leave the key alone (and Release reports nil:
// while our lease is live, a key no longer ours is our own earlier
// release's work, H5);
// the command-path handoff (handOnce) returns the WRONGTYPE as a failure
// of the release, leaving the Lock in doubt, and a second Release fails
// the same way.
func TestReleaseOfAKeyReplacedByAListIsNotHeldOnEveryPath(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		lock, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.NoError(t, b.raw.Del(ctx, "lock.k").Err())
		require.NoError(t, b.raw.RPush(ctx, "lock.k", "a").Err())

		err = lock.Release(ctx)
		// Not ours while our lease is live: taken for our own earlier
		// release whose reply was lost (H5, forcetrace.go), so nil.
		assert.NoError(t, err)
		assert.Equal(t, []string{"a"}, b.raw.LRange(ctx, "lock.k", 0, -1).Val())
	})
}

// A queued attempt that wins by SET NX just as Acquire's context ends (here
// a cancel, as a semaphore cancels the waits on its other permits once one
// is won) still takes its entry off the queue: every way out of the queue
// removes the entry, winning included (protocol.go). Were the entry left
// there, the holder's own Release would read it at the head of the queue
// and hand the key to it: a provisional value for a wait that has ended,
// dropped by the Locker (route), which keeps the key from everyone for the
// claim window while Release reports it handed on.
func TestAWinAtTheEndOfItsContextTakesItsEntryOffTheQueue(t *testing.T) {
	for _, p := range paths[1:] { // the command transport; the scripts take the entry off in queued.lua
		t.Run(p.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				holder, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)

				client := b.client(t)
				var waiter *stalledWait
				cancelled := &cancelAfterWin{waiter: func() *stalledWait { return waiter }}
				client.AddHook(cancelled)
				waiter = stalledWaiterOn(t, b, client, "lock.k", p.opt)
				b.queued(t, "lock.k", 1)
				cancelled.armed.Store(true)

				// The default threshold: the release frees the key and
				// wakes the waiter, whose SET NX wins it.
				require.NoError(t, holder.Release(ctx))
				lock := await.Recv(t, waiter.acquired, "the waiter's Acquire, won as its context ended")
				require.False(t, cancelled.armed.Load(), "the waiter won by SET NX (or SETNX)")
				assert.Empty(t, b.queuedNow("lock.k"), "the winner's entry is off the queue")

				// Past the threshold, a release hands the key to the first
				// in line: the entry, had it stayed.
				b.clock.Advance(10 * DefaultStarvationThreshold)
				require.NoError(t, lock.Release(ctx))
				assert.Equal(t, "<missing>", b.value(t, "lock.k"), "the release frees the key, not hands it to the holder's own old entry")
			})
		})
	}
}
