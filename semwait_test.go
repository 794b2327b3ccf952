package setnxlock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// A semaphore's waits stand in its one queue (semwait.go): one entry each,
// whichever permit is released next is handed to the first of them, and a
// wait handed a second permit keeps the first and hands the second on,
// never the one it holds (one owner per value).

// semaphoreWaiter starts s.Acquire(ctx) and returns where its permit, or
// its failure, arrives.
func semaphoreWaiter(t *testing.T, ctx context.Context, s *Semaphore) <-chan *Lock {
	got := make(chan *Lock, 1)
	go func() {
		lock, err := s.Acquire(ctx)
		assert.NoError(t, err, "the waiter's Acquire")
		got <- lock
	}()
	return got
}

// lineOf waits until the semaphore's one queue holds n entries, and
// returns them, first in line first.
func lineOf(t *testing.T, b *backend, name string, n int) []redis.Z {
	t.Helper()
	var line []redis.Z
	require.Eventually(t, func() bool {
		line = b.raw.ZRangeWithScores(context.Background(), waitersKey(PermitsKey(name)), 0, -1).Val()
		return len(line) == n
	}, await.Timeout, time.Millisecond, "%d waits in the semaphore's queue", n)
	return line
}

// allPermitsHeld takes every one of the permits of the semaphore name
// with a Locker whose releases hand each permit to the first in line,
// however short its wait.
func allPermitsHeld(t *testing.T, b *backend, p lockPath, name string, permits int) []*Lock {
	t.Helper()
	releaser := semaphoreOf(t, b.locker(t, p.opt, WithStarvationThreshold(0)), name, permits)
	held := make([]*Lock, permits)
	for i := range held {
		lock, err := releaser.TryAcquire(ctx)
		require.NoError(t, err)
		held[i] = lock
	}
	return held
}

func TestSemaphoreWaitsStandOnceInTheSemaphoresOneQueue(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		held := allPermitsHeld(t, b, p, "sem", 2)
		waitCtx := await.Context(t)
		first := semaphoreWaiter(t, waitCtx, semaphoreOf(t, b.locker(t, p.opt), "sem", 2))
		lineOf(t, b, "sem", 1)
		second := semaphoreWaiter(t, waitCtx, semaphoreOf(t, b.locker(t, p.opt), "sem", 2))
		lineOf(t, b, "sem", 2)
		for i := range 2 {
			assert.Zero(t, b.raw.Exists(ctx, waitersKey(PermitKey("sem", i))).Val(), "no queue of permit %d's own", i)
		}

		require.NoError(t, held[1].Release(ctx))
		lock := await.Recv(t, first, "the first waiter's permit")
		require.NotNil(t, lock)
		assert.Equal(t, PermitKey("sem", 1), lock.Key(), "the permit released, handed to the first in line")
		lineOf(t, b, "sem", 1)
		require.NoError(t, held[0].Release(ctx))
		other := await.Recv(t, second, "the second waiter's permit")
		require.NotNil(t, other)
		assert.Equal(t, PermitKey("sem", 0), other.Key())
		lineOf(t, b, "sem", 0)
		require.NoError(t, lock.Release(ctx))
		require.NoError(t, other.Release(ctx))
	})
}

// A wait's entry can be handed a second permit after it holds one: a copy
// of its queued attempt that put it in line again (H10), here pushed to
// the head of the line by hand. Its Locker hands the second permit on to
// the next in line at once, and never the permit the wait holds, whose
// value carries the entry's token too: declining that would give one
// permit two holders.
func TestASemaphoreWaitHandedASecondPermitHandsItOnAndKeepsItsOwn(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		held := allPermitsHeld(t, b, p, "sem", 2)
		waitCtx := await.Context(t)
		firstLocker := b.locker(t, p.opt)
		first := semaphoreWaiter(t, waitCtx, semaphoreOf(t, firstLocker, "sem", 2))
		entry := lineOf(t, b, "sem", 1)[0]
		member := entry.Member.(string)
		_, token, ok := parseEntry(member)
		require.True(t, ok, "an entry: %s", member)
		require.NoError(t, held[1].Release(ctx))
		lock := await.Recv(t, first, "the first waiter's permit")
		require.NotNil(t, lock)
		require.Equal(t, PermitKey("sem", 1), lock.Key())
		require.Eventually(t, func() bool {
			value := b.value(t, lock.Key())
			return tokenOf(value) == token && !strings.Contains(value, provisionalMark+string(tokenSeparator))
		}, await.Timeout, time.Millisecond, "the first waiter's claim")
		ours := b.value(t, lock.Key())

		second := semaphoreWaiter(t, waitCtx, semaphoreOf(t, b.locker(t, p.opt), "sem", 2))
		lineOf(t, b, "sem", 1)
		require.NoError(t, b.raw.ZAdd(ctx, waitersKey(PermitsKey("sem")), redis.Z{Score: 0, Member: member}).Err())
		// A stray handoff of the permit it holds, then the real handoff
		// of the other: the Locker hears them in that order.
		end := provisionalEnd(b.clock.Now())
		require.NoError(t, b.raw.Publish(ctx, handoffChannel(firstLocker.handoff.id), formatPayload(token, end, PermitKey("sem", 1))).Err())
		require.NoError(t, held[0].Release(ctx))

		other := await.Recv(t, second, "the second waiter's permit, handed on by the first's Locker")
		require.NotNil(t, other)
		assert.Equal(t, PermitKey("sem", 0), other.Key())
		// Read in the test's own goroutine: assert.Never's reads run in
		// goroutines of their own, one of which can outlast the test and
		// read a server already stopped (a panic of the suite, 2026-11-27).
		for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			require.Equal(t, ours, b.value(t, lock.Key()), "the permit the first waiter holds is never handed on")
		}
		require.NoError(t, lock.Release(ctx), "still the first waiter's")
		require.NoError(t, other.Release(ctx))
	})
}

// listeningWaiterInLine puts the entry of a wait of token WAITING, whose
// Locker ("listener") listens, first in the semaphore's queue, and
// returns the Locker's subscription and the entry.
func listeningWaiterInLine(t *testing.T, b *backend, s *Semaphore) (*redis.PubSub, string) {
	t.Helper()
	sub := b.raw.Subscribe(ctx, handoffChannel("listener"))
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.Receive(ctx)
	require.NoError(t, err, "the waiter's subscription")
	waiting := formatEntry("listener", "WAITING")
	require.NoError(t, b.raw.ZAdd(ctx, s.queue(), redis.Z{Score: float64(b.clock.Now().Add(-time.Second).UnixMicro()), Member: waiting}).Err())
	return sub, waiting
}

// A permit is handed on only within the recorded count (protocol.go):
// after a shrink, the release of a permit past the new count, and the
// leave of a wait holding one, delete it and hand it to nobody, though a
// listening waiter stands first in line; the release of a permit within
// the count hands it to that waiter. A wait heard keeps its permit without
// reading the count again (Semaphore.Acquire), so a handoff past the count
// would be one holder too many.
func TestAPermitPastTheRecordedCountIsDeletedNotHandedOn(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, queueing Option) {
		l := b.locker(t, queueing, WithStarvationThreshold(0))
		s := semaphoreOf(t, l, "sem", 2)
		held := make(map[string]*Lock)
		for range 2 {
			lock, err := s.TryAcquire(ctx)
			require.NoError(t, err)
			held[lock.Key()] = lock
		}
		within, past := PermitKey("sem", 0), PermitKey("sem", 1)
		require.Len(t, held, 2)

		sub, waiting := listeningWaiterInLine(t, b, s)
		inLine := func() []string { return b.raw.ZRange(ctx, s.queue(), 0, -1).Val() }

		require.NoError(t, s.Resize(ctx, 1))
		require.NoError(t, held[past].Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, past), "the release of a permit past the count deletes it")
		assert.Equal(t, []string{waiting}, inLine(), "the waiter still first in line")

		// A wait holding the permit past the count (a value carrying its
		// token, as a handoff before the shrink wrote it) leaves the line.
		leaving := l.queueEntryOf(past, "LEAVING")
		b.set(t, past, provisionalValue(b.clock.Now(), leaving.token))
		require.NoError(t, l.onPath(func(p path) error { return p.queue().leave(ctx, leaving) }))
		assert.Equal(t, "<missing>", b.value(t, past), "the leave of a wait holding a permit past the count deletes it")
		assert.Equal(t, []string{waiting}, inLine(), "the waiter still first in line")

		require.NoError(t, held[within].Release(ctx))
		assert.Equal(t, "WAITING", tokenOf(b.value(t, within)), "the permit within the count, handed to the waiter")
		msg := await.Recv(t, sub.Channel(), "the handoff's message")
		token, _, key, ok := parsePayload(msg.Payload)
		require.True(t, ok, "a payload: %q", msg.Payload)
		assert.Equal(t, []string{"WAITING", within}, []string{token, key}, "the first message the waiter hears: the permit within the count")
		assert.Empty(t, inLine())
	})
}

// Both transports read a recorded count by one rule (protocol.go): a
// count is a positive integer within int64, written as digits alone; the
// release of permit 1 hands it to the first in line only while 1 is below
// such a count, and deletes it (handing nothing on) otherwise, whatever
// the value at the count's key.
func TestEveryTransportReadsTheRecordedCountAlike(t *testing.T) {
	for _, c := range []struct {
		recorded string
		handed   bool
	}{
		{"2", true},
		{"0002", true},
		{"9223372036854775807", true},
		{"1", false},
		{"0", false},
		{"", false},
		{"+2", false},
		{"2.0", false},
		{"9223372036854775808", false},
		{"99999999999999999999", false},
		{"000000000000000000000002", true},
	} {
		t.Run(fmt.Sprintf("%q", c.recorded), func(t *testing.T) {
			onEachQueueingPath(t, func(t *testing.T, b *backend, queueing Option) {
				l := b.locker(t, queueing, WithStarvationThreshold(0))
				s := semaphoreOf(t, l, "sem", 2)
				var second *Lock
				for range 2 {
					lock, err := s.TryAcquire(ctx)
					require.NoError(t, err)
					if lock.Key() == PermitKey("sem", 1) {
						second = lock
					}
				}
				require.NotNil(t, second, "permit 1 taken")
				_, waiting := listeningWaiterInLine(t, b, s)
				b.set(t, PermitsKey("sem"), c.recorded)

				require.NoError(t, second.Release(ctx))
				if c.handed {
					assert.Equal(t, "WAITING", tokenOf(b.value(t, second.Key())), "permit 1 is within the count: handed to the waiter")
					return
				}
				assert.Equal(t, "<missing>", b.value(t, second.Key()), "permit 1 is not within the count: deleted")
				assert.Equal(t, []string{waiting}, b.raw.ZRange(ctx, s.queue(), 0, -1).Val(), "the waiter still in line")
			})
		})
	}
}

// A wait that began before a Resize grew the count has the old count: a
// permit at or past it, handed to its entry (within the recorded count),
// is not its to take. It declines it at once, and the next in line is
// handed it, rather than left waiting out the provisional value's end
// (here never: the clock does not move, and miniredis expires nothing).
func TestAWaitOfAnOlderCountHandsOnAPermitPastIt(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		allPermitsHeld(t, b, p, "sem", 2)
		waitCtx := await.Context(t)
		olderCtx, stopOlder := context.WithCancel(waitCtx)
		defer stopOlder()
		older := make(chan error, 1)
		olderSem := semaphoreOf(t, b.locker(t, p.opt), "sem", 2)
		go func() {
			lock, err := olderSem.Acquire(olderCtx)
			if err == nil {
				err = fmt.Errorf("the older wait took %s", lock.Key())
			}
			older <- err
		}()
		lineOf(t, b, "sem", 1)

		grown := semaphoreOf(t, b.locker(t, p.opt, WithStarvationThreshold(0)), "sem", 2)
		require.NoError(t, grown.Resize(ctx, 3))
		third, err := grown.TryAcquire(ctx)
		require.NoError(t, err)
		require.Equal(t, PermitKey("sem", 2), third.Key(), "the permit the count grew by")

		newerLocker := b.locker(t, p.opt)
		newer := semaphoreWaiter(t, waitCtx, semaphoreOf(t, newerLocker, "sem", 3))
		line := lineOf(t, b, "sem", 2)
		newerHeard := listenTo(t, b, newerLocker)
		require.NoError(t, third.Release(ctx))

		// The older wait's decline hands permit 2 on: the newer waiter's
		// channel carries the handoff. Without the decline nothing is sent
		// to it (the release handed the permit to the older wait, and a
		// value that runs out is taken by a poll, unannounced). Which route
		// then serves the newer wait, the message or its own poll finding a
		// value with its token (announcedPoll, real time), is a race the
		// Event reports either way (WaitKind); the handoff is the story.
		msg := await.Recv(t, newerHeard, "the handoff of permit 2 to the newer waiter, by the older wait's decline")
		token, end, key, ok := parsePayload(msg.Payload)
		require.True(t, ok, "a payload: %q", msg.Payload)
		assert.Equal(t, []string{entryToken(line[1].Member.(string)), PermitKey("sem", 2)}, []string{token, key},
			"the first message the newer waiter hears: permit 2, to its entry (line: %v)", line)
		assert.NotEmpty(t, end, "a handoff, with its provisional end, not a wake-up")
		lock := await.Recv(t, newer, "the newer waiter's permit, handed on by the older wait")
		require.NotNil(t, lock)
		assert.Equal(t, PermitKey("sem", 2), lock.Key())
		require.NoError(t, lock.Release(ctx))
		stopOlder()
		assert.ErrorIs(t, await.Recv(t, older, "the older wait's end"), context.Canceled, "the older wait took nothing")
	})
}

// A wait's decline of a permit past its count that fails (its reply lost,
// H5) does not abandon the wait: it still expects its handoffs, and none
// is declined for it. An abandoned wait would be deaf to the permits
// handed to it, and the route's decline of one it then claimed by its own
// attempt would hand its lease on (one owner per value).
func TestAWaitWhoseDeclineFailedStillHearsItsHandoffs(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, queueing Option) {
		allPermitsHeld(t, b, lockPath{opt: queueing}, "sem", 2)
		client := b.client(t)
		lost := loseStepReply(client, stepLeave)
		olderLocker := b.lockerOn(t, client, queueing)
		olderSem := semaphoreOf(t, olderLocker, "sem", 2)
		olderCtx, stopOlder := context.WithCancel(await.Context(t))
		defer stopOlder()
		older := make(chan error, 1)
		go func() {
			lock, err := olderSem.Acquire(olderCtx)
			if err == nil {
				err = fmt.Errorf("the older wait took %s", lock.Key())
			}
			older <- err
		}()
		_, token, ok := parseEntry(lineOf(t, b, "sem", 1)[0].Member.(string))
		require.True(t, ok)

		grown := semaphoreOf(t, b.locker(t, queueing, WithStarvationThreshold(0)), "sem", 2)
		require.NoError(t, grown.Resize(ctx, 3))
		third, err := grown.TryAcquire(ctx)
		require.NoError(t, err)
		require.Equal(t, PermitKey("sem", 2), third.Key())
		require.NoError(t, third.Release(ctx))
		require.Eventually(t, lost.Load, await.Timeout, time.Millisecond, "the older wait's decline, its reply lost")
		lineOf(t, b, "sem", 1) // back in line: the decline has returned

		h := &olderLocker.handoff
		h.mu.Lock()
		_, expected := h.expected[token]
		_, abandoned := h.abandoned[token]
		h.mu.Unlock()
		assert.True(t, expected, "the older wait still hears its handoffs")
		assert.False(t, abandoned, "no handoff to the older wait is declined")
		stopOlder()
		assert.ErrorIs(t, await.Recv(t, older, "the older wait's end"), context.Canceled)
	})
}
