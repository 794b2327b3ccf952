package setnxlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// The fields a metrics adapter needs (issue 25): how long an Acquire
// waited, its attempts, the way it was served, its outcome, the path, and
// how long a lock was held. The Lockers share the backend's ManualClock,
// so every duration is exact.

// ofKind returns the events of kind seen so far.
func (e *events) ofKind(kind EventKind) []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var of []Event
	for _, ev := range e.seen {
		if ev.Kind == kind {
			of = append(of, ev)
		}
	}
	return of
}

// awaitKind waits, at most 5s, until n events of kind have been seen.
func (e *events) awaitKind(t *testing.T, kind EventKind, n int) []Event {
	t.Helper()
	require.Eventually(t, func() bool { return len(e.ofKind(kind)) >= n }, 5*time.Second, time.Millisecond,
		"%d %v events (seen: %s)", n, kind, e.kinds())
	return e.ofKind(kind)
}

// acquireOutcome is what an Acquire in the background returned.
type acquireOutcome struct {
	lock *Lock
	err  error
}

// acquireObserved starts Acquire of key on l in the background, bounded
// by waitCtx.
func acquireObserved(waitCtx context.Context, l *Locker, key string) <-chan acquireOutcome {
	done := make(chan acquireOutcome, 1)
	go func() {
		lock, err := l.Acquire(waitCtx, key)
		done <- acquireOutcome{lock, err}
	}()
	return done
}

// servedWait is a waiter on lock.k behind a live holder, with the events
// its Locker observed.
type servedWait struct {
	holder *Lock
	seen   *events
	result <-chan acquireOutcome
}

func startServedWait(t *testing.T, b *backend, holderOpts, waiterOpts []Option) *servedWait {
	t.Helper()
	holder, err := b.locker(t, holderOpts...).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	s := &servedWait{holder: holder, seen: &events{}}
	waiter := b.locker(t, append([]Option{WithObserver(s.seen)}, waiterOpts...)...)
	warm(t, waiter)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	t.Cleanup(cancel)
	s.result = acquireObserved(waitCtx, waiter, "lock.k")
	s.seen.awaitKind(t, EventWaiting, 1)
	return s
}

// served returns the waiter's Lock and the event that reported its win,
// checking the fields every win shares: one EventWaiting before it, the
// wait's duration by the shared clock, the outcome and the path.
func (s *servedWait) served(t *testing.T, kind EventKind, waited time.Duration, path PathKind) (*Lock, Event) {
	t.Helper()
	got := await.Recv(t, s.result, "the waiter's Acquire")
	require.NoError(t, got.err)
	claimSettled(got.lock)
	won := s.seen.ofKind(kind)
	require.Len(t, won, 1, "events: %s", s.seen.kinds())
	e := won[0]
	waiting := s.seen.ofKind(EventWaiting)
	require.Len(t, waiting, 1, "one EventWaiting per Acquire that waits")
	assert.Equal(t, 1, waiting[0].Attempts, "the wait starts after the first attempt")
	assert.Equal(t, "lock.k", waiting[0].Key)
	assert.True(t, waiting[0].ExpiresAt.After(s.holder.ExpiresAt()) || waiting[0].ExpiresAt.Equal(s.holder.ExpiresAt()),
		"EventWaiting states when the holder's lease may be taken over: %v, the holder's end %v", waiting[0].ExpiresAt, s.holder.ExpiresAt())
	assert.Equal(t, waited, e.Waited, "Waited, by the shared ManualClock")
	assert.Equal(t, OutcomeAcquired, e.Outcome)
	assert.Equal(t, path, e.Path)
	assert.Equal(t, "lock.k", e.Key)
	assert.True(t, got.lock.ExpiresAt().Equal(e.ExpiresAt) || e.Wait == WaitHandoff, "ExpiresAt %v, the Lock's %v", e.ExpiresAt, got.lock.ExpiresAt())
	assert.GreaterOrEqual(t, e.Attempts, 1)
	return got.lock, e
}

func TestAnAcquireThatWaitedSaysHowItWasServed(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		t.Run("handed over", func(t *testing.T) {
			// The wait's own poll (announcedPoll, real time) would claim the
			// value handed to it if it fired before the message arrived, and
			// report WaitPoll: it polls once an hour here. (Every millisecond,
			// this subtest and the next fail in about one run of three.)
			s := startServedWait(t, b, nil, []Option{WithStarvationThreshold(time.Second), pollEvery(time.Hour)})
			b.queued(t, "lock.k", 1)
			b.clock.Advance(3 * time.Second) // past the starvation threshold: the release hands over
			require.NoError(t, s.holder.Release(ctx))
			lock, e := s.served(t, EventAcquired, 3*time.Second, PathScripts)
			assert.Equal(t, WaitHandoff, e.Wait)
			assert.GreaterOrEqual(t, e.Attempts, 2, "the first attempt finds the key held; a later one queues")
			require.NoError(t, lock.Release(ctx))
		})
		t.Run("barging", func(t *testing.T) {
			s := startServedWait(t, b, nil, []Option{WithStarvationThreshold(time.Hour), pollEvery(time.Hour)}) // the free key to a poll: as above
			b.queued(t, "lock.k", 1)
			require.NoError(t, s.holder.Release(ctx)) // frees the key and wakes the first in line
			lock, e := s.served(t, EventAcquired, 0, PathScripts)
			assert.Equal(t, WaitBarging, e.Wait)
			assert.GreaterOrEqual(t, e.Attempts, 3, "held, queued, then the winning race")
			require.NoError(t, lock.Release(ctx))
		})
		t.Run("woken up", func(t *testing.T) {
			// Fencing Lockers do not queue: the wait listens to the key's
			// wake-ups, and polls only every 10s.
			s := startServedWait(t, b, []Option{WithFencing()}, []Option{WithFencing(), WithBackoff(10*time.Second, 10*time.Second)})
			s.seen.awaitKind(t, EventContended, 2) // the attempt after the subscription was confirmed: listed, asleep
			require.NoError(t, s.holder.Release(ctx))
			lock, e := s.served(t, EventAcquired, 0, PathScripts)
			assert.Equal(t, WaitWakeUp, e.Wait)
			assert.Equal(t, 3, e.Attempts, "held, held once subscribed, then the win")
			require.NoError(t, lock.Release(ctx))
		})
		t.Run("polled", func(t *testing.T) {
			s := startServedWait(t, b, nil, nil)
			b.clock.Advance(time.Second)
			require.NoError(t, b.raw.Del(ctx, "lock.k").Err()) // gone without a word: only a poll finds out
			lock, e := s.served(t, EventAcquired, time.Second, PathScripts)
			assert.Equal(t, WaitPoll, e.Wait)
			require.NoError(t, lock.Release(ctx))
		})
		t.Run("taken over", func(t *testing.T) {
			s := startServedWait(t, b, nil, nil) // the holder crashed: it never releases
			b.clock.Advance(time.Minute)
			lock, e := s.served(t, EventRecovered, time.Minute, PathScripts)
			assert.Equal(t, WaitTakeover, e.Wait)
			require.NoError(t, lock.Release(ctx))
		})
	})
}

func TestAFailedAcquireReportsItsOutcome(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		t.Cleanup(func() { _ = holder.Release(ctx) })

		for _, tc := range []struct {
			name    string
			end     func(cancel context.CancelFunc)
			outcome Outcome
			ctxErr  error
		}{
			{"timeout", func(context.CancelFunc) {}, OutcomeTimeout, context.DeadlineExceeded},
			{"canceled", func(cancel context.CancelFunc) { cancel() }, OutcomeCanceled, context.Canceled},
		} {
			t.Run(tc.name, func(t *testing.T) {
				seen := &events{}
				waiter := b.locker(t, WithObserver(seen))
				waitCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				result := acquireObserved(waitCtx, waiter, "lock.k")
				seen.awaitKind(t, EventWaiting, 1)
				b.clock.Advance(2 * time.Second)
				tc.end(cancel)
				got := await.Recv(t, result, "the waiter's Acquire, ending with its context")
				require.ErrorIs(t, got.err, ErrNotAcquired)
				require.ErrorIs(t, got.err, tc.ctxErr)
				failed := seen.awaitKind(t, EventAcquireFailed, 1)
				require.Len(t, failed, 1)
				e := failed[0]
				assert.Equal(t, tc.outcome, e.Outcome)
				assert.Equal(t, got.err, e.Err)
				assert.Equal(t, 2*time.Second, e.Waited)
				assert.Equal(t, WaitPoll, e.Wait, "waiting, and nothing woke it but its timers")
				assert.GreaterOrEqual(t, e.Attempts, 1)
				assert.Equal(t, "lock.k", e.Key)
				assert.Equal(t, PathNone, e.Path)
			})
		}

		t.Run("error", func(t *testing.T) {
			seen := &events{}
			b.set(t, "lock.garbage", "not a lock")
			_, err := b.locker(t, WithObserver(seen)).Acquire(await.Context(t), "lock.garbage")
			require.ErrorIs(t, err, ErrNotLockValue)
			assert.Equal(t, []Event{{Kind: EventAcquireFailed, Key: "lock.garbage", Err: err, Attempts: 1, Outcome: OutcomeError}}, seen.seen,
				"no wait: an H7 value is not retried")
		})
		t.Run("context ended before the call", func(t *testing.T) {
			seen := &events{}
			ended, cancel := context.WithCancel(ctx)
			cancel()
			_, err := b.locker(t, WithObserver(seen)).Acquire(ended, "lock.k")
			require.ErrorIs(t, err, context.Canceled)
			assert.Equal(t, []Event{{Kind: EventAcquireFailed, Key: "lock.k", Err: err, Attempts: 1, Outcome: OutcomeCanceled}}, seen.seen)
		})
	})
}

func TestEventsNameThePathAndHowLongTheLockWasHeld(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		for _, tc := range []struct {
			name string
			opts []Option
			path PathKind
		}{
			{"scripts", nil, PathScripts},
			{"commands", []Option{WithoutScripts()}, PathCommands},
			{"classic", []Option{WithClassicCommands()}, PathClassic},
		} {
			t.Run(tc.name, func(t *testing.T) {
				seen := &events{}
				l := b.locker(t, append([]Option{WithObserver(seen)}, tc.opts...)...)
				lock, err := l.TryAcquire(ctx, "lock."+tc.name)
				require.NoError(t, err)
				b.clock.Advance(1500 * time.Millisecond)
				require.NoError(t, lock.Release(ctx))
				sameEvent(t, Event{Kind: EventAcquired, Key: "lock." + tc.name, ExpiresAt: lock.ExpiresAt(), Attempts: 1, Outcome: OutcomeAcquired, Path: tc.path}, seen.seen[0])
				sameEvent(t, Event{Kind: EventReleased, Key: "lock." + tc.name, ExpiresAt: lock.ExpiresAt(), Path: tc.path, Held: 1500 * time.Millisecond}, seen.seen[1])
				assert.Len(t, seen.seen, 2)
			})
		}

		t.Run("a lease that ran out", func(t *testing.T) {
			seen := &events{}
			lock, err := b.locker(t, WithObserver(seen)).TryAcquire(ctx, "lock.ranout")
			require.NoError(t, err)
			start := b.clock.Now()
			b.clock.Advance(time.Hour)
			await.Recv(t, lock.Done(), "the loss of a lease that ran out")
			lost := seen.ofKind(EventLost)
			require.Len(t, lost, 1)
			assert.Equal(t, lock.ExpiresAt().Sub(start), lost[0].Held, "held until the lease's end, not until the loss was noticed")
			assert.Equal(t, 10*time.Second, lost[0].Held, "the whole TTL: ManualClocks state no uncertainty")
		})
	})
}

// callTracer is a CallObserver that marks the context of each call and
// records how each ended.
type callTracer struct {
	events
	begun []string
	ended []CallResult
}

type callMark struct{}

func (c *callTracer) BeginCall(ctx context.Context, call Call, key string) (context.Context, func(CallResult)) {
	c.mu.Lock()
	c.begun = append(c.begun, call.String()+" "+key)
	c.mu.Unlock()
	return context.WithValue(ctx, callMark{}, call.String()), func(r CallResult) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.ended = append(c.ended, r)
	}
}

// markSeen is a go-redis hook that records the call mark of the context
// each command was sent with.
type markSeen struct{ marks chan string }

func (m markSeen) DialHook(next redis.DialHook) redis.DialHook { return next }
func (m markSeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		mark, _ := ctx.Value(callMark{}).(string)
		select {
		case m.marks <- mark:
		default:
		}
		return next(ctx, cmd)
	}
}
func (m markSeen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestACallObserverHearsEachCallInTheCallersContext(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		tracer := &callTracer{}
		client := b.client(t)
		l := b.lockerOn(t, client, WithObserver(tracer))
		warm(t, l)
		marks := markSeen{marks: make(chan string, 100)}
		client.AddHook(marks)

		lock, err := l.Acquire(await.Context(t), "lock.k")
		require.NoError(t, err)
		_, refused := l.TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, refused, ErrNotAcquired)
		b.clock.Advance(time.Second)
		require.NoError(t, lock.Release(ctx))

		close(marks.marks)
		var sent []string
		for mark := range marks.marks { // bounded: closed above
			if len(sent) == 0 || sent[len(sent)-1] != mark {
				sent = append(sent, mark)
			}
		}
		assert.Equal(t, []string{"acquire", "try_acquire", "release"}, sent, "every command in the context BeginCall returned")
		assert.Equal(t, []string{"acquire lock.k", "try_acquire lock.k", "release lock.k"}, tracer.begun)
		require.Len(t, tracer.ended, 3)
		assert.Equal(t, CallResult{Event: tracer.seen[0]}, tracer.ended[0], "Acquire ends with the event of its win")
		assert.Equal(t, EventAcquired, tracer.ended[0].Event.Kind)
		assert.Equal(t, CallResult{Err: refused}, tracer.ended[1], "a TryAcquire refused has no event of its own")
		assert.Equal(t, EventReleased, tracer.ended[2].Event.Kind)
		assert.Equal(t, time.Second, tracer.ended[2].Event.Held)
		assert.NoError(t, tracer.ended[2].Err)
		assert.True(t, errors.Is(tracer.ended[1].Err, ErrNotAcquired))
	})
}

// The names are attribute values on dashboards: fixed.
func TestTheNamesOfWaysOutcomesPathsAndCalls(t *testing.T) {
	var names []string
	for w := WaitNone; w <= WaitTakeover+1; w++ {
		names = append(names, w.String())
	}
	assert.Equal(t, []string{"none", "handoff", "barging", "wakeup", "poll", "takeover", "unknown"}, names)
	names = nil
	for o := OutcomeNone; o <= OutcomeError+1; o++ {
		names = append(names, o.String())
	}
	assert.Equal(t, []string{"none", "acquired", "timeout", "canceled", "error", "unknown"}, names)
	names = nil
	for p := PathNone; p <= PathClassic+1; p++ {
		names = append(names, p.String())
	}
	assert.Equal(t, []string{"none", "scripts", "commands", "classic", "unknown"}, names)
	names = nil
	for c := Call(0); c <= CallRelease+1; c++ {
		names = append(names, c.String())
	}
	assert.Equal(t, []string{"unknown", "acquire", "try_acquire", "release", "unknown"}, names)
	assert.Equal(t, "waiting acquire_failed refresh_failed", EventWaiting.String()+" "+EventAcquireFailed.String()+" "+EventRefreshFailed.String())
}

// pollEvery sets how often a wait that will hear of a release still polls
// (announcedPoll), for tests that tell which route served a wait.
func pollEvery(d time.Duration) Option {
	return func(c *config) error { c.announcedPoll = d; return nil }
}
