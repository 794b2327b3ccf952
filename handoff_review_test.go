package setnxlock

// The findings of a second, independent review of the queue and handoff
// path, after issue 11's fixes. Each test states the schedule and the
// invariant it broke; each failed before its fix.

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

// Finding: handOn (handon.lua) ends its loop only when ZREM takes
// the head entry off the queue, but it calls ZREM with pcall and ignores
// a refusal. README lists +zrem among the *optional* handoff grants ("the
// Locker falls back without them"). Schedule:
//  1. a Locker whose ACL user has everything but ZREM holds lock.k;
//  2. a waiter of a crashed process left its entry in lock.k's queue
//     (nobody listens on its Locker's channel);
//  3. the holder releases: release.lua -> handOn reads the head entry,
//     its ZREM is refused (pcall, ignored), it SETs the provisional value,
//     PUBLISH counts 0 receivers, and the loop reads the same head again,
//     for ever.
//
// The script has written, so SCRIPT KILL cannot stop it: the whole server
// is stuck (BUSY to every client) until it is shut down without saving.
// Nothing blocks the Locker; transient is not refused (a refusal must
// switch the feature off, not spin).
func TestAReleaseWhoseUserMayNotZremNeverSpinsTheServer(t *testing.T) {
	onEachQueueingPathOf(t, realServer, func(t *testing.T, b *backend, path Option) {
		releaser := b.lockerOn(t, restrictedClient(t, b, "nozrem", "&*", "+@all", "-zrem"), path)
		holder, err := releaser.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		dead := newToken() + ":" + newToken() // a crashed waiter's entry: nobody listens for its Locker
		require.NoError(t, b.raw.ZAdd(ctx, waitersKey("lock.k"), redis.Z{Score: 1, Member: dead}).Err())

		releaseCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err = holder.Release(releaseCtx)
		assert.NoError(t, err, "the release returns: the dead entry is skipped (or the queue given up), not looped on")

		pingCtx, cancelPing := context.WithTimeout(ctx, time.Second)
		defer cancelPing()
		assert.NoError(t, b.raw.Ping(pingCtx).Err(), "the server still answers")
	})
}

// The same, with nothing synthetic: every Locker's user lacks ZREM, one
// worker waits for another and holds the key past its Locker's linger.
// The waiter's entry is never removed (handOn's and queued.lua's ZREMs are
// refused, silently), so its own release finds its own entry first, whose
// Locker no longer listens, and spins.
func TestWorkersWithoutZremNeverHangTheServer(t *testing.T) {
	onEachQueueingPathOf(t, realServer, func(t *testing.T, b *backend, path Option) {
		client := restrictedClient(t, b, "nozrem", "&*", "+@all", "-zrem")
		holder, err := b.lockerOn(t, client, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		waiter := acquireInBackground(t, b.lockerOn(t, restrictedClient(t, b, "nozrem", "&*", "+@all", "-zrem"), path), "lock.k")
		b.queued(t, "lock.k", 1)
		require.NoError(t, holder.Release(ctx))
		lock := await.Recv(t, waiter, "the waiter's Acquire")
		require.NotNil(t, lock)
		time.Sleep(handoffLinger + 100*time.Millisecond) // the work: its Locker stops listening meanwhile

		releaseCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		assert.NoError(t, lock.Release(releaseCtx), "the release returns")
		pingCtx, cancelPing := context.WithTimeout(ctx, time.Second)
		defer cancelPing()
		assert.NoError(t, b.raw.Ping(pingCtx).Err(), "the server still answers")
	})
}

// countingHook counts each of the library's scripts run by EVALSHA (refused
// or not) and lets fn replace the outcome of the nth run of one of them.
type countingHook struct {
	script string
	fn     func(nth int, err error) error
	n      *int
}

func (h countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "evalsha" && scriptNames[cmd.Args()[1].(string)] == h.script {
			*h.n++
			return h.fn(*h.n, err)
		}
		return err
	}
}

func (h countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Finding: the release's refusal cascade (scriptedRelease) blames
// the queue for a refusal whenever the retry without the queue is *not
// refused*, a network error included. Schedule:
//  1. the releaser's ACL user may not touch the release marker
//     ({lock.k}.released) but may use the queue: the first run, with both,
//     is refused (NOPERM, key);
//  2. the second run, with the marker and without the queue, would be
//     refused too, but its reply is lost (a timeout);
//  3. !refused(timeout) -> "the queue was the refused key": handoff off
//     for good, though the queue was never refused.
//
// Breaks "transient is not refused" (network errors never switch a
// feature off). Effect: the Locker never queues or hands over again. The
// scripts' own: a script names every key it touches.
func TestALostReplyInTheReleaseCascadeSwitchesNothingOff(t *testing.T) {
	b := realServer(t)
	client := restrictedClient(t, b, "nomarker", "resetkeys", "~lock.*", "~{lock.*}.waiters", "&*", "+@all")
	for _, s := range []*redis.Script{acquireScript, queuedScript, releaseScript, leaveScript} {
		require.NoError(t, s.Load(ctx, b.raw).Err())
	}
	var runs int
	client.AddHook(countingHook{script: "release", n: &runs, fn: func(nth int, err error) error {
		if nth == 2 {
			return errLostReply{} // the retry without the queue: its reply (NOPERM) is lost
		}
		return err
	}})
	releaser := b.lockerOn(t, client, scripted, WithFormat(UnixMillis)) // bare values: the release marks itself
	require.True(t, releaser.handsOver())
	holder, err := releaser.TryAcquire(ctx, "lock.k")
	require.NoError(t, err)

	_ = holder.Release(ctx) // in doubt: a lost reply
	assert.GreaterOrEqual(t, runs, 2)
	assert.True(t, releaser.caps.allows(capQueue), "the queue was never refused; only a reply was lost")
}

// holdHook, once armed, stops the client's next EVALSHA before it is sent
// until release is called (or the test ends).
type holdHook struct {
	armed   *atomic.Bool
	arrived chan struct{}
	open    chan struct{}
	once    *sync.Once
}

func newHoldHook(t *testing.T, c *redis.Client) holdHook {
	h := holdHook{armed: new(atomic.Bool), arrived: make(chan struct{}), open: make(chan struct{}), once: new(sync.Once)}
	t.Cleanup(h.release)
	c.AddHook(h)
	return h
}

func (h holdHook) release() { h.once.Do(func() { close(h.open) }) }

func (h holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" && h.armed.CompareAndSwap(true, false) {
			close(h.arrived)
			<-h.open // bounded: the test releases it, or its cleanup does
		}
		return next(ctx, cmd)
	}
}

func (h holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Finding (first come, first served): every queued attempt sets
// the queue's expiry to *its own* safety net (queued.lua: PEXPIRE waiters
// ARGV[2]), shortening the net an earlier waiter set. Schedule:
//  1. waiter A (TTL 10s) queues first; its next poll is late (held);
//  2. waiter B (TTL 10ms, so a net of 20ms) queues behind A, and its poll
//     sets the queue to expire in 20ms;
//  3. 30ms pass: the whole queue expires, A's place with it, though A's own
//     net (20s) was far from over;
//  4. B's next poll re-creates the queue with B first; A's late poll then
//     queues behind B; the release serves B before A.
//
// A waiter that keeps polling keeps its place only as long as the
// shortest-TTL waiter's net. Fairness only.
func TestAShortLeaseWaiterCutsNobodysPlaceShort(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		a := stalledWaiter(t, b, "lock.k", path)
		entryA := b.queued(t, "lock.k", 1)[0]
		a.stall.armed.Store(true)
		await.Recv(t, a.stall.arrived, "A's next poll, held")

		short := stalledWaiter(t, b, "lock.k", path, WithTTL(10*time.Millisecond))
		b.queued(t, "lock.k", 2)
		b.serverSleep(30 * time.Millisecond) // far less than A's own net
		time.Sleep(3 * announcedPoll)        // B polls again meanwhile
		require.NotEmpty(t, b.queuedNow("lock.k"), "the queue outlives B's short net")
		assert.Equal(t, entryA, b.queuedNow("lock.k")[0], "A keeps its place while it is held")
		a.stall.pass()
		entries := b.queued(t, "lock.k", 2)
		assert.Equal(t, entryA, entries[0], "A, who queued first and kept polling, is still first in line")

		require.NoError(t, holder.Release(ctx))
		var lock *Lock
		select {
		case lock = <-a.acquired:
		case lock = <-short.acquired:
			t.Error("B was served before A")
		case <-time.After(await.Timeout):
			t.Fatal("nobody was served after the release")
		}
		require.NoError(t, lock.Release(ctx))
		require.NotNil(t, await.Recv(t, short.acquired, "B served after A"))
	})
}

// Finding (every way out of the queue removes the entry): a queued
// attempt whose script is refused falls back to the commands within the
// same attempt (claimKey), with the entry's token in its value; a SETNX
// (SET NX PX) win there removes nothing. Schedule:
//  1. a classic holder (plain DEL on release) holds lock.k; waiter W, on a
//     user that may script, queues (entry E = "<L>:<T>");
//  2. W's next poll is held just before its EVALSHA; the admin revokes
//     @scripting; the holder releases (DEL): the key is free;
//  3. W's poll: EVALSHA -> NOPERM -> scripts off -> SET NX PX wins with
//     W's value: Acquire returns a Lock, and E stays in the queue;
//  4. W releases (commands: DEL). X, another Locker, takes the key and
//     releases it within W's Locker's linger: handOn hands it to E, its
//     Locker "hears" it and drops it (the wait is over): held by nobody
//     for the claim window.
//
// A move between the transports: the scripts' own.
func TestAWinOnTheCommandFallbackLeavesTheQueue(t *testing.T) {
	b := realServer(t)
	holder, err := b.locker(t).TryAcquire(ctx, "lock.k") // classic: releases with DEL
	require.NoError(t, err)
	client := restrictedClient(t, b, "waiter", "&*", "+@all")
	hold := newHoldHook(t, client)
	w := b.lockerOn(t, client, scripted)
	warm(t, w)
	acquired := acquireInBackground(t, w, "lock.k")
	b.queued(t, "lock.k", 1)
	hold.armed.Store(true)
	select {
	case <-hold.arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("W never polled again")
	}
	require.NoError(t, b.raw.Do(ctx, "acl", "setuser", "waiter", "-@scripting").Err())
	require.NoError(t, holder.Release(ctx))
	hold.release()

	lock := await.Recv(t, acquired, "W's Acquire")
	require.NotNil(t, lock)
	assert.Empty(t, b.queuedNow("lock.k"), "W won: its entry must be off the queue")
	require.NoError(t, lock.Release(ctx))

	x := b.locker(t, scripted)
	xLock, err := x.TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	require.NoError(t, xLock.Release(ctx))
	assert.Equal(t, "<missing>", b.value(t, "lock.k"), "nobody waits: the release must free the key, not hand it to W's stale entry")
}

// Finding (transient is not refused, in its wider sense: only "not
// allowed" or "unknown command" switches a feature off): queued.lua
// answers 3, "the queue was refused", for any error of ZSCORE, ZRANGE or
// ZADD, and queuedClaim then switches handoff off for the whole Locker,
// for good. A WRONGTYPE on one key's queue (a foreign string at
// {lock.a}.waiters) is not a refusal, yet it stops the Locker queueing on
// every key.
func TestAForeignValueAtOneQueueStopsOnlyThatWaitQueueing(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder := b.locker(t, path)
		_, err := holder.TryAcquire(ctx, "lock.a")
		require.NoError(t, err)
		_, err = holder.TryAcquire(ctx, "lock.b")
		require.NoError(t, err)
		b.set(t, waitersKey("lock.a"), "not a queue")
		l := b.locker(t, path)
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err = l.Acquire(short, "lock.a")
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.True(t, l.caps.allows(capQueue), "a WRONGTYPE at one key's queue is not a refusal of the queue")
		waitCtx, stop := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() { _, err := l.Acquire(waitCtx, "lock.b"); waited <- err }()
		b.queued(t, "lock.b", 1) // the Locker still queues on another key
		stop()
		require.ErrorIs(t, await.Recv(t, waited, "the wait on the other key, given up"), ErrNotAcquired)
	})
}

// Finding (H5 for releases, issue 11's finding 11 again): the
// release marker ({key}.released) holds only the *last* release of the
// key. go-redis resends a script only after its read timeout, by which
// time a queue can have moved on. Schedule:
//  1. A holds lock.k; W waits in its queue;
//  2. A's release script runs (hands the key to W) and its reply is lost;
//  3. before go-redis resends it, W claims the key, works and releases:
//     the marker now holds W's value;
//  4. A's resend finds the key not A's and the marker not A's: Release
//     reports ErrNotHeld, a false alarm that A's lease was lost.
//
// The scripts' own, as the marker is: go-redis never resends a watched
// EXEC.
func TestAResentReleaseKnowsItsWorkAfterTheNextHolderReleased(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		p := faultproxy.Start(t, b.addr)
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Second})
		t.Cleanup(func() { _ = c.Close() })
		a := b.lockerOn(t, c, scripted)
		warm(t, a)
		lock, err := a.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		wReleased := make(chan error, 1)
		w := b.locker(t, scripted)
		waitCtx := await.Context(t)
		go func() {
			next, err := w.Acquire(waitCtx, "lock.k")
			if err == nil {
				err = next.Release(ctx) // at once: well within A's read timeout
			}
			wReleased <- err
		}()
		b.queued(t, "lock.k", 1)
		sent := p.Count("evalsha")
		p.LoseReplies(func(command string, nth int) bool { return command == "evalsha" && nth == sent+1 })

		err = lock.Release(ctx)
		require.NoError(t, await.Recv(t, wReleased, "W's cycle"))
		require.Equal(t, sent+2, p.Count("evalsha"), "go-redis resent the release")
		assert.NoError(t, err, "A released its lease: the resend must not report it lost")
	})
}

// Finding (H3 with bare timestamps, seen in `make chaos`, formats mode):
// a bare-timestamp Release whose reply was lost is resent by go-redis
// after its read timeout; by then another holder can have written the
// very same value (UnixSeconds: any lease taken in the same second), which
// the resend's owner check takes for ours. The resend must recognise its
// own release by the run's id and leave the successor's lock alone.
func TestAResentBareReleaseLeavesAnIdenticalSuccessorAlone(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		p := faultproxy.Start(t, b.addr)
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Second})
		t.Cleanup(func() { _ = c.Close() })
		a := b.lockerOn(t, c, scripted, WithFormat(UnixSeconds))
		warm(t, a)
		lock, err := a.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		sent := p.Count("evalsha")
		p.LoseReplies(func(command string, nth int) bool { return command == "evalsha" && nth == sent+1 })

		released := make(chan error, 1)
		go func() { released <- lock.Release(ctx) }()
		require.Eventually(t, func() bool { return b.value(t, "lock.k") == "<missing>" }, await.Timeout, time.Millisecond,
			"the release's first run to delete the key")
		successor, err := b.locker(t, scripted, WithFormat(UnixSeconds)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.Equal(t, lock.value, successor.value, "the same second: the very same bare value")

		assert.NoError(t, await.Recv(t, released, "A's Release, resent by go-redis"))
		require.Equal(t, sent+2, p.Count("evalsha"), "go-redis resent the release")
		assert.Equal(t, successor.value, b.value(t, "lock.k"), "the resend left the successor's lock alone")
		require.NoError(t, successor.Release(ctx))
	})
}
