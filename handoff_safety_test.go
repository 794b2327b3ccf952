package setnxlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
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

// The scenarios of issue 11, an independent review of the queue and the
// handoff, each with the hazard or invariant it breaks. Each failed on the
// code before the fix.

// workerMark tags the context of the wait a test stalls.
type workerMark struct{}

// loseAWinThenStall makes the next write that wins a key (wonKey) for a
// context tagged with workerMark reach Redis and be applied, but report
// its reply lost (H5); that wait's next command then stops until the test
// passes the gate, so that others can run in between.
func loseAWinThenStall(t *testing.T, c *redis.Client) *gate {
	g := &gate{arrived: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.pass)
	var lost atomic.Bool
	var arrived sync.Once
	c.AddHook(stallHook{before: func(ctx context.Context) {
		if ctx.Value(workerMark{}) != nil && lost.Load() {
			arrived.Do(func() { close(g.arrived) })
			<-g.open // bounded: the test passes the gate, or its cleanup does
		}
	}, after: func(ctx context.Context, cmd redis.Cmder, err error) error {
		if ctx.Value(workerMark{}) == nil || lost.Load() || !wonKey(cmd, err) {
			return nil
		}
		lost.Store(true)
		return errLostReply{}
	}})
	return g
}

// wonKey reports whether a command of an attempt, answered err, created the
// key or claimed it, on either transport: a script whose reply starts
// with 1 (acquire.lua, queued.lua), SET NX answered OK, SET NX GET
// answered nil, SETNX answered 1.
func wonKey(cmd redis.Cmder, err error) bool {
	switch cmd := cmd.(type) {
	case *redis.Cmd:
		return (cmd.Name() == "evalsha" || cmd.Name() == "eval") && scriptOutcome(sliceOf(cmd.Val())) == 1
	case *redis.StatusCmd:
		return cmd.Name() == "set" && cmd.Val() == "OK"
	case *redis.StringCmd: // SET NX PX GET: nil when it created the key
		return cmd.Name() == "set" && errors.Is(err, redis.Nil)
	case *redis.IntCmd:
		return cmd.Name() == "setnx" && cmd.Val() == 1
	}
	return false
}

// stallHook runs before on each command before it is sent and after on it
// once answered; a non-nil error from after replaces its outcome.
type stallHook struct {
	before func(ctx context.Context)
	after  func(ctx context.Context, cmd redis.Cmder, err error) error // err: nil, or redis.Nil
}

func (h stallHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h stallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.before(ctx)
		err := next(ctx, cmd)
		if err == nil || errors.Is(err, redis.Nil) { // SET NX PX GET answers nil when it wins
			if lost := h.after(ctx, cmd, err); lost != nil {
				return lost
			}
		}
		return err
	}
}

func (h stallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.before(ctx)
		return next(ctx, cmds)
	}
}

func sliceOf(v any) []any {
	s, _ := v.([]any)
	return s
}

// Finding 1 (H5; one owner per value): a queued attempt's value carries
// its wait's token and belongs to that wait alone. Schedule: H holds k;
// worker 1 of Locker L queues; H releases and frees k (barging: worker 1
// has waited nothing by the clock); worker 1's next attempt creates k and
// its reply is lost; worker 2 of L tries k. Before, the Locker remembered worker 1's
// value for any of its attempts: worker 2 was granted it, and worker 1's
// next poll too, two Locks on one key.
func TestAQueuedWaitsValueBelongsToThatWaitAlone(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path, barging).TryAcquire(ctx, "lock.k") // frees the key and wakes the waiter
		require.NoError(t, err)
		client := b.client(t)
		l := b.lockerOn(t, client, path)
		warm(t, l)
		lost := loseAWinThenStall(t, client)
		worker1 := make(chan *Lock, 1)
		go func() {
			lock, err := l.Acquire(context.WithValue(await.Context(t), workerMark{}, 1), "lock.k")
			assert.NoError(t, err)
			claimSettled(lock)
			worker1 <- lock
		}()
		b.queued(t, "lock.k", 1)

		require.NoError(t, holder.Release(ctx))
		lost.wait(t) // worker 1's queued attempt created the key, its reply was lost, and it is about to poll again
		_, err = l.TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "worker 2 of the same Locker must not be granted worker 1's value")
		lost.pass()

		lock := await.Recv(t, worker1, "worker 1's Acquire")
		require.NotNil(t, lock)
		assert.Equal(t, lock.value, b.value(t, "lock.k"))
		assert.Empty(t, b.queuedNow("lock.k"))
		require.NoError(t, lock.Release(ctx))
	})
}

// Finding 2 (write, then announce): a release whose ACL user may not write
// the waiter's lease must not announce it. Before, the script published the
// handoff first and then failed on the SET: the waiter took a lease the key
// never stored, and every later release of that user did the same.
func TestAHandoffIsWrittenBeforeItIsAnnounced(t *testing.T) {
	onEachQueueingPathOf(t, realServer, func(t *testing.T, b *backend, path Option) {
		releaser := b.lockerOn(t, restrictedClient(t, b, "noset", "&*", "+@all", "-set"), path)
		holder, err := releaser.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		waiter := acquireInBackground(t, b.locker(t, path), "lock.k")
		b.queued(t, "lock.k", 1)

		require.NoError(t, holder.Release(ctx))
		assert.False(t, releaser.caps.allows(capQueue), "the refused write switches the releaser's handoff off")
		lock := await.Recv(t, waiter, "the waiter's Acquire")
		require.NotNil(t, lock)
		assert.Equal(t, lock.value, b.value(t, "lock.k"), "the lease the waiter holds is the one stored")
		_, err = b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "nobody else gets in while the waiter holds the key")
		require.NoError(t, lock.Release(ctx))
	})
}

// Finding 3 (H4, H6; the holder's clock bounds its lease): a releaser
// whose clock runs 5s ahead of the waiter's, with a grace of 1ms. Before,
// the handed lease was the releaser's clock plus the TTL while Redis kept
// the key TTL plus grace: Redis deleted the key 5s before the waiter's
// lease ended. Now the waiter claims the key with a lease of its own clock
// and its own safety net.
func TestAHandedLeaseIsDatedByTheWaitersOwnClock(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		margin, grace := WithSkewMargin(5*time.Second), WithExpiryGrace(time.Millisecond)
		ahead := NewManualClock(b.clock.Now().Add(5 * time.Second))
		holder, err := b.locker(t, path, margin, grace, WithClock(ahead)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		waiter := acquireInBackground(t, b.locker(t, path, margin, grace), "lock.k")
		b.queued(t, "lock.k", 1)

		released := time.Now()
		require.NoError(t, holder.Release(ctx))
		lock := await.Recv(t, waiter, "the waiter's Acquire")
		require.NotNil(t, lock)
		assert.Equal(t, lock.value, b.value(t, "lock.k"), "the key states the waiter's lease, for every reader")
		assert.True(t, b.clock.Now().Add(10*time.Second).Equal(lock.ExpiresAt()), "dated by the waiter's clock: %v", lock.ExpiresAt().Sub(b.clock.Now()))
		// The ManualClock stands still while Redis counts real time: add
		// back what passed since the claim, at most since the release.
		assert.GreaterOrEqual(t, b.raw.PTTL(ctx, "lock.k").Val()+time.Since(released), lock.ExpiresAt().Sub(b.clock.Now()), "Redis keeps the key at least as long as the lease (H6)")
		require.NoError(t, lock.Release(ctx))
	})
}

// Finding 4 (every way out of the queue removes the entry): a wait keeps
// one entry however often it polls, and a wait that wins through the
// Locker's lost-reply memory (another worker's applied write) takes its
// entry off the queue. Before, the entry stayed, and the next release
// handed the key to it: held by nobody for a whole lease.
func TestAWaitThatWinsThroughTheLostReplyMemoryLeavesTheQueue(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path, barging).TryAcquire(ctx, "lock.k") // frees the key and wakes the waiter
		require.NoError(t, err)
		client := b.client(t)
		l := b.lockerOn(t, client, path)
		warm(t, l)
		waiter := acquireInBackground(t, l, "lock.k")
		b.queued(t, "lock.k", 1)
		time.Sleep(3 * announcedPoll) // it polls a few times...
		require.Len(t, b.queuedNow("lock.k"), 1, "...and keeps one entry")

		// Another worker of the same Locker writes the key; its reply is
		// lost, so the Locker remembers the value, and the queued wait
		// finds it and claims it.
		lost := loseAWinThenStall(t, client)
		require.NoError(t, holder.Release(ctx))
		_, err = l.TryAcquire(context.WithValue(ctx, workerMark{}, 2), "lock.k")
		require.Error(t, err, "the worker whose reply was lost")
		lost.pass()

		lock := await.Recv(t, waiter, "the queued wait's Acquire")
		require.NotNil(t, lock)
		assert.Empty(t, b.queuedNow("lock.k"), "the winner's entry is off the queue")
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "nobody is handed the key after the last holder")
	})
}

// Finding 4, a removal that fails: a wait gives up, and its leave never
// reaches Redis, so its entry stays in the queue. Its Locker, still
// listening for another wait, declines the handoff to that entry at once
// and hands the key on: it costs a round trip, not a lease.
func TestAHandoffToAnAbandonedEntryIsDeclinedAtOnce(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		otherHolder, err := b.locker(t, path).TryAcquire(ctx, "lock.other")
		require.NoError(t, err)
		client := b.client(t)
		var leaves atomic.Int32
		hookStep(client, stepLeave, func(send func() error, cmds []redis.Cmder) error {
			err := send()
			if stepLeave.sentBy(cmds) && leaves.Add(1) == 1 {
				return errLostReply{} // as if it never got there: undo it below
			}
			return err
		})
		l := b.lockerOn(t, client, path)
		warm(t, l)
		stay := acquireInBackground(t, l, "lock.other") // keeps the Locker listening
		b.queued(t, "lock.other", 1)
		quitCtx, quit := context.WithCancel(ctx)
		gaveUp := make(chan error, 1)
		go func() { _, err := l.Acquire(quitCtx, "lock.k"); gaveUp <- err }()
		entry := b.queued(t, "lock.k", 1)[0]
		quit()
		require.ErrorIs(t, await.Recv(t, gaveUp, "the wait that gave up"), ErrNotAcquired)
		require.NoError(t, b.raw.ZAdd(ctx, waitersKey("lock.k"), redis.Z{Score: 1, Member: entry}).Err()) // the leave never applied

		require.NoError(t, holder.Release(ctx))
		require.Eventually(t, func() bool { return b.value(t, "lock.k") == "<missing>" }, 5*time.Second, time.Millisecond,
			"the handoff to the abandoned entry declined and the key freed, without moving the clock")
		// The counter moves once the leave's reply is in, which may come
		// after the key was seen freed.
		assert.Eventually(t, func() bool { return leaves.Load() == 2 }, 5*time.Second, time.Millisecond,
			"its Locker ran the leave again when the key was handed to it")
		assert.Empty(t, b.queuedNow("lock.k"))

		require.NoError(t, otherHolder.Release(ctx))
		other := await.Recv(t, stay, "the wait that kept the Locker listening")
		require.NotNil(t, other)
		require.NoError(t, other.Release(ctx))
	})
}

// Findings 4 and 5 (heard is not claimed): a release hands the key to a
// dead entry that PUBLISH counts as heard, by a pattern subscriber (an ops
// tool's PSUBSCRIBE setnxlock:*) or by a half-open subscription of a
// crashed host that the server still counts. Nobody claims it; the
// provisional value lasts claimWindow by the clocks, instead of a lease.
// The server keeps it past its stated end, by the releaser's grace
// (provisionalNet): its waiter may hold on it until then by its own clock,
// which the net must not cut short (H6); the page's takeover ends it.
func TestAHandoffNobodyClaimsCostsTheClaimWindowNotALease(t *testing.T) {
	for _, listener := range []struct {
		name   string
		listen func(t *testing.T, b *backend, locker string)
	}{
		{"a pattern subscriber", func(t *testing.T, b *backend, _ string) {
			ps := b.client(t).PSubscribe(ctx, handoffChannelPrefix+"*")
			t.Cleanup(func() { _ = ps.Close() })
			_, err := ps.Receive(ctx)
			require.NoError(t, err)
		}},
		{"a half-open subscription", func(t *testing.T, b *backend, locker string) {
			conn, err := net.Dial("tcp", b.addr)
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			channel := handoffChannelPrefix + locker
			_, err = fmt.Fprintf(conn, "*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n", len(channel), channel)
			require.NoError(t, err)
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
			_, err = bufio.NewReader(conn).ReadString('\n') // subscribed; it never reads again
			require.NoError(t, err)
		}},
	} {
		t.Run(listener.name, func(t *testing.T) {
			onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
				holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				deadLocker := newToken()
				listener.listen(t, b, deadLocker)
				require.NoError(t, b.raw.ZAdd(ctx, waitersKey("lock.k"), redis.Z{Score: 1, Member: deadLocker + ":" + newToken()}).Err())

				require.NoError(t, holder.Release(ctx))
				assert.NotEqual(t, "<missing>", b.value(t, "lock.k"), "handed to the dead entry: PUBLISH said it was heard")
				net := b.raw.PTTL(ctx, "lock.k").Val()
				assert.Greater(t, net, claimWindow, "Redis keeps it past its stated end (H6)")
				assert.LessOrEqual(t, net, holder.locker.provisionalNet(), "for the claim window and the releaser's grace")
				other := b.locker(t, path)
				_, err = other.TryAcquire(ctx, "lock.k")
				require.ErrorIs(t, err, ErrNotAcquired, "held for the claim window")
				b.clock.Advance(claimWindow)
				lock, err := other.TryAcquire(ctx, "lock.k")
				require.NoError(t, err, "taken over once the claim window is over, not a lease later")
				require.NoError(t, lock.Release(ctx))
			})
		})
	}
}

// Finding 6 (nothing blocks the Locker): a SUBSCRIBE whose confirmation
// never comes (a half-open connection) held the Locker-wide mutex, and
// every other Acquire of the Locker waited on it, even on a free key. Now
// the subscription is made outside any lock and its confirmation awaited
// at most subscribeTimeout; the stuck wait polls meanwhile.
func TestAStuckSubscriptionHoldsUpNoOtherWait(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		p := faultproxy.Start(t, b.addr)
		l := b.lockerOn(t, b.clientThrough(t, p), path)
		warm(t, l)
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.held")
		require.NoError(t, err)
		p.LoseReplies(func(command string, nth int) bool { return command == "subscribe" && nth == 1 })
		stuckCtx, cancel := context.WithCancel(ctx) // no deadline: the wait ends only with the key
		t.Cleanup(cancel)
		stuck := make(chan error, 1)
		go func() {
			lock, err := l.Acquire(stuckCtx, "lock.held")
			if err == nil {
				err = lock.Release(ctx)
			}
			stuck <- err
		}()
		require.Eventually(t, func() bool { return p.Count("subscribe") == 1 }, 5*time.Second, time.Millisecond, "the stuck wait subscribing")

		free := make(chan error, 1)
		go func() {
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			lock, err := l.Acquire(short, "lock.free")
			if err == nil {
				err = lock.Release(ctx)
			}
			free <- err
		}()
		require.NoError(t, await.Recv(t, free, "an Acquire of a free key beside the stuck subscription"))

		require.NoError(t, holder.Release(ctx))
		require.NoError(t, await.Recv(t, stuck, "the stuck wait's Acquire, once the key was released"))
	})
}

// Finding 9 (first come, first served): three waiters arrive 80ms apart
// and each polls every announcedPoll while it waits. Before, each poll
// removed its entry and pushed it at the back, so the queue rotated and
// the order served was 2, 4, 1, 3. A poll now keeps its entry's place.
// The same holds for the waits of one Locker (a service's goroutines
// sharing it): each has an entry of its own.
func TestWaitersAreServedInArrivalOrderHoweverOftenTheyPoll(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "a Locker each", true: "one Locker"}[shared], func(t *testing.T) {
			onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
				holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				s := newServings(3)
				one := b.locker(t, path)
				for i := range 3 {
					l := one
					if !shared {
						l = b.locker(t, path)
					}
					s.wait(t, fmt.Sprint(i), l, "lock.k")
					b.queued(t, "lock.k", i+1)
					time.Sleep(80 * time.Millisecond) // more than one poll
				}
				require.NoError(t, holder.Release(ctx))
				assert.Equal(t, []string{"0", "1", "2"}, s.order(t))
			})
		})
	}
}

// Finding 11 (H5 for releases): go-redis resends a release script whose
// reply was lost; the second run finds the key freed, or handed on, by the
// first. Before, Release then reported ErrNotHeld, a false alarm that the
// lease was lost. The release marker lets the second run know its own
// work. The scripts' own: go-redis never resends a watched EXEC. A lost
// handoff's reply on either transport is queue_contract_test.go's.
func TestAReleaseResentAfterALostReplyKnowsItsOwnWork(t *testing.T) {
	for _, queued := range []bool{false, true} {
		t.Run(map[bool]string{false: "deleted", true: "handed over"}[queued], func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				p := faultproxy.Start(t, b.addr)
				l := b.lockerOn(t, b.clientThrough(t, p), scripted)
				warm(t, l)
				lock, err := l.TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				var waiter <-chan *Lock
				if queued {
					waiter = acquireInBackground(t, b.locker(t, scripted), "lock.k")
					b.queued(t, "lock.k", 1)
				}
				sent := p.Count("evalsha")
				p.LoseReplies(func(command string, nth int) bool { return command == "evalsha" && nth == sent+1 })

				require.NoError(t, lock.Release(ctx), "the resent release recognises the first")
				require.Equal(t, sent+2, p.Count("evalsha"), "go-redis resent the release")
				if queued {
					next := await.Recv(t, waiter, "the waiter handed the key")
					require.NotNil(t, next)
					require.NoError(t, next.Release(ctx))
				}
				assert.Equal(t, "<missing>", b.value(t, "lock.k"))
			})
		})
	}
}

// Finding 4, the way out when scripts are refused mid-wait: the leave
// script can no longer run, so the wait leaves with commands (ZREM, and a
// watched delete of a key carrying its token), and waits for wake-ups.
// Before, nothing removed the entry. A move between the transports: the
// scripts' own.
func TestAWaitWhoseScriptsAreRevokedLeavesTheQueue(t *testing.T) {
	b := realServer(t)
	holder, err := b.locker(t, scripted).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	waiter := acquireInBackground(t, b.lockerOn(t, restrictedClient(t, b, "waiter", "&*", "+@all"), scripted), "lock.k")
	b.queued(t, "lock.k", 1)

	require.NoError(t, b.raw.Do(ctx, "acl", "setuser", "waiter", "-@scripting").Err())
	b.queued(t, "lock.k", 0)
	require.NoError(t, holder.Release(ctx))
	lock := await.Recv(t, waiter, "the waiter's Acquire, by wake-up or polling")
	require.NotNil(t, lock)
	require.NoError(t, lock.Release(ctx))
}

// Every way out of the queue removes the entry, Locker.Close included: a
// wait of a closed Locker leaves the queue, and goes on waiting for
// wake-ups and polling.
func TestCloseTakesWaitsOutOfTheQueue(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		l := b.locker(t, path)
		waiter := acquireInBackground(t, l, "lock.k")
		b.queued(t, "lock.k", 1)

		require.NoError(t, l.Close())
		b.queuedInLine(t, "lock.k", 0) // it may list itself for wake-ups (wakelisten.go)
		require.NoError(t, holder.Release(ctx))
		lock := await.Recv(t, waiter, "the wait of the closed Locker")
		require.NotNil(t, lock)
		require.NoError(t, lock.Release(ctx))
	})
}

// A wait ends with its context, not with its subscription: go-redis bounds
// a read by a context's deadline but not by its cancellation, so a wait
// whose SUBSCRIBE confirmation was swallowed (a half-open connection)
// returned only when the subscription gave up, long after its context was
// cancelled (seen by the chaos harness: 1.6s). Here the subscription would
// wait an hour; the cancelled wait must return all the same. Both kinds of
// wait: woken by pub/sub (a fencing Locker) and queued.
func TestAWaitEndsWithItsContextWhileItsSubscriptionHangs(t *testing.T) {
	patient := func(c *config) error { c.subscribeTimeout = time.Hour; return nil }
	type kind struct {
		name string
		opts []Option
	}
	kinds := []kind{{"woken by pub/sub", []Option{scripted, WithFencing(), patient}}}
	for _, p := range queueingPaths {
		kinds = append(kinds, kind{"queued/" + p.name, []Option{p.opt, patient}})
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				p := faultproxy.Start(t, b.addr)
				l := b.lockerOn(t, b.clientThrough(t, p), kind.opts...)
				_, err := b.locker(t, kind.opts[0]).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				p.LoseReplies(func(command string, nth int) bool { return command == "subscribe" })
				waitCtx, cancel := context.WithCancel(ctx)
				t.Cleanup(cancel)
				result := make(chan error, 1)
				go func() { _, err := l.Acquire(waitCtx, "lock.k"); result <- err }()
				require.Eventually(t, func() bool { return p.Count("subscribe") == 1 }, 5*time.Second, time.Millisecond, "the wait subscribing")

				cancel()
				err = await.Recv(t, result, "the cancelled wait returning while its subscription hangs")
				require.ErrorIs(t, err, context.Canceled)
				require.NoError(t, l.Close())
			})
		})
	}
}
