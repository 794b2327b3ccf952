package setnxlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// A semaphore (semaphore.go) is N lock keys; these tests hold it to at
// most N holders, each counted only while its own lease is live, on every
// path and backend, and check what it adds to a lock: the agreed count,
// waiting on every permit in arrival order, one fence counter, Do.

func semaphoreOf(t *testing.T, l *Locker, name string, permits int) *Semaphore {
	t.Helper()
	s, err := l.Semaphore(name, permits)
	require.NoError(t, err)
	return s
}

// holders runs workers that share the given Lockers round-robin, each
// taking a permit of the semaphore sem(permits) cycles times; crash decides
// whether a holder abandons its permit instead of releasing it.
func semaphoreContend(t *testing.T, lockers []*Locker, permits, workers, cycles int, crash func() bool) *criticalSection {
	t.Helper()
	var cs criticalSection
	var wg sync.WaitGroup
	waitCtx := await.Context(t)
	for w := range workers {
		s := semaphoreOf(t, lockers[w%len(lockers)], "sem", permits)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cycles {
				lock, err := s.Acquire(waitCtx)
				if !assert.NoError(t, err) {
					return
				}
				cs.granted(lock, "held")
				cs.hold(lock, systemClock{}, func() {
					runtime.Gosched()
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				})
				if crash() {
					continue // the holder dies: its permit's lease must run out first
				}
				err = lock.Release(waitCtx)
				if errors.Is(err, ErrNotHeld) && expired(lock.ExpiresAt(), time.Now()) {
					continue // it overran its lease: counted apart by hold (H8)
				}
				if !assert.NoError(t, err) {
					return
				}
				cs.granted(lock, "released")
			}
		}()
	}
	await.Group(t, &wg, "the semaphore's workers")
	counted, overran := cs.counted()
	t.Logf("%d sections counted, %d overran their lease (H8: not counted); at most %d at once", counted, overran, cs.most())
	assert.Equal(t, workers*cycles, counted+overran)
	return &cs
}

func TestSemaphoreNeverHasMoreThanItsPermitsHolders(t *testing.T) {
	const permits, workers, lockers, cycles = 3, 9, 3, 12
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		ls := make([]*Locker, lockers)
		for i := range ls {
			ls[i] = b.locker(t, p.opt, WithClock(systemClock{}), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
		}
		cs := semaphoreContend(t, ls, permits, workers, cycles, func() bool { return false })
		assert.LessOrEqual(t, cs.most(), permits, "more holders than permits at once")
		// A permit that another wait of a winning Acquire won meanwhile is
		// given back in the background (Semaphore.drain), after its wait's
		// leave: it may still be on its way when the workers are done. It
		// must be back well before any lease could end it (10s), or it was
		// leaked for a lease. A handoff nobody claims costs the claim
		// window, never a lease (protocol.go): its provisional value states
		// that window's end, and miniredis, which expires nothing, keeps it
		// until an acquisition takes it over; it is no lease.
		for i := range permits {
			key := PermitKey("sem", i)
			if !assert.Eventually(t, func() bool { return noLease(b.value(t, key)) }, 3*time.Second, time.Millisecond, "permit %d released", i) {
				value := b.value(t, key)
				t.Fatalf("permit %d still holds %s, at %v: %s", i, value, time.Now().UTC().Format(time.RFC3339Nano), cs.whose(value))
			}
		}
		assert.Equal(t, "3", b.value(t, PermitsKey("sem")), "the count is recorded")
	})
}

// noLease reports whether a key's value (b.value) holds no lease: it is
// missing, or a provisional value a handoff wrote, stating the end of the
// claim window from its writing, not later.
func noLease(value string) bool {
	if value == "<missing>" {
		return true
	}
	end, err := heldUntil(value)
	return err == nil && strings.Contains(value, provisionalMark+string(tokenSeparator)) && !end.After(time.Now().Add(claimWindow))
}

// Holders crash now and then: their permits are taken over once their
// leases end (the page's GETSET), and the count still holds.
func TestSemaphoreRecoversCrashedHoldersPermits(t *testing.T) {
	const permits, workers, lockers, cycles = 2, 6, 3, 10
	onEachBackend(t, func(t *testing.T, b *backend) {
		ls := make([]*Locker, lockers)
		for i := range ls {
			ls[i] = b.locker(t, WithClock(systemClock{}), WithTTL(150*time.Millisecond), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
		}
		var crashes atomic.Int64
		cs := semaphoreContend(t, ls, permits, workers, cycles, func() bool {
			if rand.IntN(15) == 0 {
				crashes.Add(1)
				return true
			}
			return false
		})
		t.Logf("%d crashed holders' permits recovered", crashes.Load())
		assert.LessOrEqual(t, cs.most(), permits, "more holders than permits at once")
	})
}

// The check above can fail: two clients that disagree on the count would
// hold three permits of a semaphore of two, if the count were not agreed.
// Here the second is refused, and nothing of it is written.
func TestSemaphoreRefusesAnotherCountAndWritesNothing(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		two := semaphoreOf(t, b.locker(t, p.opt), "sem", 2)
		three := semaphoreOf(t, b.locker(t, p.opt), "sem", 3)
		held := []*Lock{}
		for range 2 {
			lock, err := two.TryAcquire(ctx)
			require.NoError(t, err)
			held = append(held, lock)
		}
		_, err := three.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrPermitsMismatch)
		_, err = three.Acquire(ctx)
		require.ErrorIs(t, err, ErrPermitsMismatch)
		require.ErrorIs(t, three.Do(ctx, func(context.Context) error { return nil }), ErrPermitsMismatch)
		assert.Equal(t, "2", b.value(t, PermitsKey("sem")))
		assert.Equal(t, "<missing>", b.value(t, PermitKey("sem", 2)), "no third permit written")
		_, err = two.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotAcquired, "both permits are held")
		for _, lock := range held {
			require.NoError(t, lock.Release(ctx))
		}
	})
}

func TestSemaphoreRejectsBadInputWritingNothing(t *testing.T) {
	b := newBackend(t, "miniredis", startMiniredis(t))
	l := b.locker(t)
	for _, c := range []struct {
		name    string
		permits int
	}{{"", 1}, {"sem", 0}, {"sem", -1}, {"}sem", 2}} {
		_, err := l.Semaphore(c.name, c.permits)
		require.ErrorIs(t, err, ErrInvalidArgument, "%q with %d permits", c.name, c.permits)
	}
	s := semaphoreOf(t, l, "sem", 2)
	require.ErrorIs(t, s.Do(ctx, nil), ErrInvalidArgument)
	require.ErrorIs(t, s.Resize(ctx, 0), ErrInvalidArgument)
	n, err := b.raw.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing written")
}

// TryAcquire takes a free permit and is refused while every permit is
// held. A pass that finds every permit held costs one round trip: the
// look at the permits that comes with the count (agreeAndLook) says so,
// and no permit is tried; a permit the look finds free is tried, and
// only it.
func TestSemaphoreTryAcquireTakesAFreePermitAndRefusesWhenAllAreHeld(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		s := semaphoreOf(t, b.locker(t, p.opt), "sem", 2)
		first, err := s.TryAcquire(ctx)
		require.NoError(t, err)
		second, err := s.TryAcquire(ctx)
		require.NoError(t, err)
		assert.NotEqual(t, first.Key(), second.Key(), "two permits")
		client := b.client(t)
		other := semaphoreOf(t, b.lockerOn(t, client, p.opt), "sem", 2)
		sent := record(client)
		_, err = other.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, "SETNX GET MGET", sent.names(), "the count and the look, one pipeline; no attempt")

		require.NoError(t, first.Release(ctx))
		sent.reset()
		again, err := other.TryAcquire(ctx)
		require.NoError(t, err, "the released permit is free")
		assert.Equal(t, first.Key(), again.Key())
		assert.True(t, strings.HasPrefix(sent.names(), "SETNX GET MGET "), "then an attempt: %s", sent.names())
		assert.Equal(t, []string{"MGET"}, sent.mentioning(second.Key()), "the held permit is looked at, not tried")
		require.NoError(t, again.Release(ctx))
		require.NoError(t, second.Release(ctx))
	})
}

// A crashed holder's permit is the page's: taken over with GETSET once its
// lease has ended by the taker's clock, not before.
func TestSemaphoreCrashedHoldersPermitIsRecoveredAfterItsLease(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		crashed := semaphoreOf(t, b.locker(t, p.opt), "sem", 1)
		abandoned, err := crashed.TryAcquire(ctx) // never released
		require.NoError(t, err)
		s := semaphoreOf(t, b.locker(t, p.opt), "sem", 1)
		_, err = s.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotAcquired, "the lease is live")
		b.clock.Set(abandoned.ExpiresAt())
		lock, err := s.TryAcquire(ctx)
		require.NoError(t, err, "the crashed holder's lease has ended")
		assert.Equal(t, PermitKey("sem", 0), lock.Key())
		require.NoError(t, lock.Release(ctx))
	})
}

// Waiters are served in arrival order: each stands once in the
// semaphore's one queue (semwait.go), and each permit released goes to the
// first in line.
func TestSemaphoreServesWaitersInArrivalOrder(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holder := semaphoreOf(t, b.locker(t, p.opt), "sem", 2)
		var held []*Lock
		for range 2 {
			lock, err := holder.TryAcquire(ctx)
			require.NoError(t, err)
			held = append(held, lock)
		}
		waitCtx := await.Context(t)
		got := make(chan string, 3)
		waiter := func(name string) {
			s := semaphoreOf(t, b.locker(t, p.opt), "sem", 2)
			go func() {
				lock, err := s.Acquire(waitCtx)
				if !assert.NoError(t, err, name) {
					got <- name + ": failed"
					return
				}
				got <- name
				<-waitCtx.Done() // bounded: holds until the test ends
				_ = lock.Release(context.Background())
			}()
		}
		queued := func(n int64) { // in the semaphore's one queue
			require.Eventually(t, func() bool {
				return b.raw.ZCard(ctx, waitersKey(PermitsKey("sem"))).Val() >= n
			}, 10*time.Second, time.Millisecond, "%d waiters queued on the semaphore", n)
		}
		waiter("first")
		queued(1)
		time.Sleep(5 * time.Millisecond) // past the starvation threshold: a release hands on
		waiter("second")
		queued(2)
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, held[1].Release(ctx))
		assert.Equal(t, "first", await.Recv(t, got, "a permit for the first waiter"))
		require.NoError(t, held[0].Release(ctx))
		assert.Equal(t, "second", await.Recv(t, got, "a permit for the second waiter"))
	})
}

// Acquire waits on every permit and gives up every wait when its context
// ends: its error matches both ErrNotAcquired and the context's, and no
// entry of it is left in a queue.
func TestSemaphoreAcquireEndsWithItsContextLeavingEveryQueue(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		s := semaphoreOf(t, b.locker(t, p.opt), "sem", 2)
		for range 2 {
			_, err := s.TryAcquire(ctx)
			require.NoError(t, err)
		}
		waitCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := semaphoreOf(t, b.locker(t, p.opt), "sem", 2).Acquire(waitCtx)
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		st, err := s.Status(ctx)
		require.NoError(t, err)
		assert.Zero(t, st.Waiters, "entries left in a permit's queue")
		assert.Len(t, st.Holders, 2)
	})
}

// With WithFencing, tokens strictly increase across all permits of one
// semaphore: they are drawn from one counter.
func TestSemaphoreFencingTokensIncreaseAcrossPermits(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		s := semaphoreOf(t, b.locker(t, p.opt, WithFencing()), "sem", 3)
		other := semaphoreOf(t, b.locker(t, p.opt, WithFencing()), "sem", 3)
		var last int64
		var held []*Lock
		for i := range 9 {
			sem := s
			if i%2 == 1 {
				sem = other
			}
			lock, err := sem.TryAcquire(ctx)
			require.NoError(t, err)
			assert.Greater(t, lock.FencingToken(), last, "acquisition %d on %s", i, lock.Key())
			last = lock.FencingToken()
			held = append(held, lock)
			if len(held) == 3 {
				require.NoError(t, held[i%3].Release(ctx))
				held = append(held[:i%3], held[i%3+1:]...)
			}
		}
		assert.Equal(t, "<missing>", b.value(t, FenceKey(PermitKey("sem", 0))), "no counter of a permit's own")
	})
}

// A permit key that holds something else (H7) is left untouched and the
// others still serve; when none is free, the error says both.
func TestSemaphoreSkipsAPermitKeyHoldingSomethingElse(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		b.set(t, PermitKey("sem", 0), "not a lock")
		s := semaphoreOf(t, b.locker(t, p.opt), "sem", 2)
		lock, err := s.TryAcquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, PermitKey("sem", 1), lock.Key())
		_, err = s.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, ErrNotLockValue)
		acquired := make(chan *Lock, 1)
		go func() {
			waiting, err := semaphoreOf(t, b.locker(t, p.opt), "sem", 2).Acquire(await.Context(t))
			assert.NoError(t, err)
			acquired <- waiting
		}()
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, lock.Release(ctx))
		waiting := await.Recv(t, acquired, "the waiter's permit")
		require.NotNil(t, waiting)
		assert.Equal(t, PermitKey("sem", 1), waiting.Key())
		require.NoError(t, waiting.Release(ctx))
		assert.Equal(t, "not a lock", b.value(t, PermitKey("sem", 0)), "left untouched")
		st, err := s.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{PermitKey("sem", 0)}, st.Foreign)
	})
}

// A count key that holds no count (H7) refuses every acquisition, and
// is left as it is.
func TestSemaphoreRefusesACountKeyHoldingSomethingElse(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.set(t, PermitsKey("sem"), "many")
		s := semaphoreOf(t, b.locker(t), "sem", 2)
		_, err := s.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotLockValue)
		_, err = s.Acquire(ctx)
		require.ErrorIs(t, err, ErrNotLockValue)
		_, err = s.Status(ctx)
		require.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, "many", b.value(t, PermitsKey("sem")))
		assert.Equal(t, "<missing>", b.value(t, PermitKey("sem", 0)), "no permit taken")
	})
}

// Status reads the count, the holders with their ends and identities, and
// the waiters; Resize changes the count, and a shrink revokes no permit.
func TestSemaphoreStatusAndResize(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		s := semaphoreOf(t, b.locker(t, WithIdentity("worker-1")), "sem", 3)
		st, err := s.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, SemaphoreStatus{Name: "sem"}, st, "nothing recorded before the first acquisition")
		var held []*Lock
		for range 3 {
			lock, err := s.TryAcquire(ctx)
			require.NoError(t, err)
			held = append(held, lock)
		}
		st, err = s.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, 3, st.Permits)
		require.Len(t, st.Holders, 3)
		for i, h := range st.Holders {
			assert.Equal(t, PermitKey("sem", i), h.Key)
			assert.Equal(t, "worker-1", h.Identity)
			assert.True(t, h.ExpiresAt.After(b.clock.Now()))
		}

		require.NoError(t, s.Resize(ctx, 1))
		assert.Equal(t, 1, s.Permits())
		assert.Equal(t, "1", b.value(t, PermitsKey("sem")))
		_, err = semaphoreOf(t, b.locker(t), "sem", 3).TryAcquire(ctx)
		require.ErrorIs(t, err, ErrPermitsMismatch, "a client of the old count is refused")
		st, err = s.Status(ctx)
		require.NoError(t, err)
		assert.Len(t, st.Holders, 3, "a shrink revokes no live permit")
		for _, lock := range held {
			require.NoError(t, lock.Release(ctx), "%s is still held", lock.Key())
		}
		lock, err := s.TryAcquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, PermitKey("sem", 0), lock.Key(), "only the permits of the new count serve")
		_, err = s.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotAcquired)
	})
}

func TestSemaphoreDoRunsTheWorkUnderAPermit(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		defer noLockGoroutineLeft(t)
		s := semaphoreOf(t, b.locker(t, p.opt), "sem", 1)
		other := semaphoreOf(t, b.locker(t, p.opt), "sem", 1)
		for _, returns := range []error{nil, errWork} {
			err := s.Do(ctx, func(workCtx context.Context) error {
				_, err := other.TryAcquire(ctx)
				assert.ErrorIs(t, err, ErrNotAcquired, "the permit is held while fn runs")
				assert.NoError(t, workCtx.Err())
				return returns
			})
			if returns == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, errWork)
			}
			assert.Equal(t, "<missing>", b.value(t, PermitKey("sem", 0)), "released when fn returned")
		}
		assert.PanicsWithValue(t, "boom", func() {
			_ = s.Do(ctx, func(context.Context) error { panic("boom") })
		})
		assert.Equal(t, "<missing>", b.value(t, PermitKey("sem", 0)), "released when fn panicked")
	})
}
