package setnxlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// Heard is a provisional hold (heard.go): the waiter handed a key returns
// from Acquire at once, holding the provisional value, and claims it in
// the background.

// gateHeardClaim stops the client before its first heard claim (claim.lua,
// or the command transport's watched claim: SET and ZREM in a MULTI,
// without PUBLISH) until the test passes the gate.
func gateHeardClaim(t *testing.T, c *redis.Client) *gate {
	g := &gate{arrived: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.pass) // a failed test must not strand the gated client
	var once sync.Once
	hookStep(c, stepClaim, func(send func() error, cmds []redis.Cmder) error {
		if sendsHeardClaim(cmds) {
			once.Do(func() {
				close(g.arrived)
				<-g.open // bounded: the test passes the gate, or its cleanup does
			})
		}
		return send()
	})
	return g
}

// sendsHeardClaim reports whether cmds are a heard claim: claim.lua, or the
// commands' claim, told by what it sends.
func sendsHeardClaim(cmds []redis.Cmder) bool {
	if len(cmds) == 1 && cmds[0].Name() == "evalsha" {
		return scriptNames[fmt.Sprint(cmds[0].Args()[1])] == "claim"
	}
	return stepClaim.sentBy(cmds)
}

// refuseHeardClaims makes the server refuse every heard claim the client
// sends from now on, as it does when out of memory: nothing is applied.
func refuseHeardClaims(c *redis.Client) *atomic.Int32 {
	refused := new(atomic.Int32)
	hookStep(c, stepClaim, func(send func() error, cmds []redis.Cmder) error {
		if !sendsHeardClaim(cmds) {
			return send()
		}
		refused.Add(1)
		err := serverError("OOM command not allowed when used memory > 'maxmemory'.")
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	})
	return refused
}

// heardWait is a queued waiter whose heard claim the test holds back,
// with the holder in front of it and the events its Locker observed.
type heardWait struct {
	holder   *Lock
	claim    *gate
	acquired <-chan acquisition
	entry    string
	events   *eventLog
}

// acquisition is what an Acquire returned.
type acquisition struct {
	lock *Lock
	err  error
}

type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (e *eventLog) Observe(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
}

// kinds lists the kinds of the events of the lock's life: not those of
// the wait (EventContended, EventWaiting).
func (e *eventLog) kinds() []EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var kinds []EventKind
	for _, ev := range e.events {
		if ev.Kind != EventContended && ev.Kind != EventWaiting {
			kinds = append(kinds, ev.Kind)
		}
	}
	return kinds
}

// queueHeardWait queues a waiter on lock.k behind a holder, its heard
// claim gated.
func queueHeardWait(t *testing.T, b *backend, path Option, opts ...Option) *heardWait {
	return queueWaitBehind(t, b, path, func(c *redis.Client) *gate { return gateHeardClaim(t, c) }, opts...)
}

// queueWaitBehind queues a waiter on lock.k behind a holder, on a client
// that hook prepares first (the gate it returns, if any, holds the heard
// claim back).
func queueWaitBehind(t *testing.T, b *backend, path Option, hook func(*redis.Client) *gate, opts ...Option) *heardWait {
	holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	client := b.client(t)
	h := &heardWait{holder: holder, claim: hook(client), events: &eventLog{}}
	w := b.lockerOn(t, client, append([]Option{path, WithObserver(h.events)}, opts...)...)
	warm(t, w)
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	t.Cleanup(cancel)
	acquired := make(chan acquisition, 1)
	go func() {
		lock, err := w.Acquire(waitCtx, "lock.k")
		acquired <- acquisition{lock, err}
	}()
	h.acquired = acquired
	h.entry = b.queued(t, "lock.k", 1)[0]
	return h
}

// handedOver releases the holder and returns the waiter's Lock, returned
// by Acquire while its claim waits at the gate.
func (h *heardWait) handedOver(t *testing.T) *Lock {
	require.NoError(t, h.holder.Release(ctx))
	got := await.Recv(t, h.acquired, "the waiter's Acquire, its claim held back")
	require.NoError(t, got.err)
	lock := got.lock
	h.claim.wait(t)
	return lock
}

// claimReturned waits until the claim of a handed Lock has returned: its
// turn is free again.
func claimReturned(t *testing.T, lock *Lock) {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, lock.lockOp(waitCtx, "await the claim"), "the claim never returned")
	lock.unlockOp()
}

func TestAcquireReturnsAHandedLockBeforeItsClaimIsConfirmed(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		h := queueHeardWait(t, b, path)
		lock := h.handedOver(t)

		require.NoError(t, lock.Err(), "held at once")
		provisional := b.value(t, "lock.k")
		assert.Equal(t, entryToken(h.entry), tokenOf(provisional), "the key holds the value handed to the waiter")
		assert.Equal(t, provisional, lock.value, "the Lock holds exactly that value")
		stated, err := parseExpiry(provisional)
		require.NoError(t, err)
		assert.False(t, lock.ExpiresAt().After(stated), "held no longer than the value states: %v past it", lock.ExpiresAt().Sub(stated))
		assert.False(t, lock.ExpiresAt().After(b.clock.Now().Add(claimWindow)), "nor than its receipt and the claim window")
		assert.Equal(t, []EventKind{EventAcquired}, h.events.kinds(), "acquired at receipt")

		h.claim.pass()
		claimReturned(t, lock)
		require.NoError(t, lock.Err())
		assert.Equal(t, lock.value, b.value(t, "lock.k"), "the claim wrote the waiter's own lease")
		assert.True(t, b.clock.Now().Add(10*time.Second).Equal(lock.ExpiresAt()), "the lease moved to the claim's own, by the waiter's clock")
		assert.Empty(t, b.queuedNow("lock.k"))
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// A claim that is not confirmed by the provisional end loses the Lock
// then, by the Locker's clock (H11); when it lands later, the key it
// claimed is given back, not left to a lease nobody holds.
func TestAHandedLockWhoseClaimIsLateIsLostAtTheProvisionalEnd(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		h := queueHeardWait(t, b, path)
		lock := h.handedOver(t)
		b.clock.Set(lock.ExpiresAt())
		await.Recv(t, lock.Done(), "the Lock lost at the provisional end")
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
		assert.Equal(t, []EventKind{EventAcquired, EventLost}, h.events.kinds())
		require.ErrorIs(t, lock.Release(ctx), ErrNotHeld, "released after it was lost")

		h.claim.pass()
		require.Eventually(t, func() bool { return b.value(t, "lock.k") == "<missing>" }, await.Timeout, time.Millisecond,
			"the late claim's lease is given back: %s", b.value(t, "lock.k"))
	})
}

// A claim that finds the key no longer holding the value handed to it
// (an operator's ForceRelease and another holder since) loses the Lock
// and leaves the other holder's value alone (H3).
func TestAHandedLockWhoseClaimFindsAnotherValueIsLost(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		h := queueHeardWait(t, b, path)
		lock := h.handedOver(t)
		other := formatValue(b.clock.Now().Add(time.Minute), newToken(), "")
		b.set(t, "lock.k", other)

		h.claim.pass()
		await.Recv(t, lock.Done(), "the Lock lost by its claim")
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
		assert.Equal(t, []EventKind{EventAcquired, EventLost}, h.events.kinds())
		assert.False(t, lock.ExpiresAt().After(b.clock.Now()),
			"the lease is over once another holder has the key, not %v later", lock.ExpiresAt().Sub(b.clock.Now()))
		require.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
		assert.Equal(t, other, b.value(t, "lock.k"), "the other holder's value is left alone")
	})
}

// A claim the server refuses (out of memory) loses the Lock, and the
// Lock gives the provisional value back at once so the next in line need
// not wait out the window. Its lease is then over by its own account:
// ExpiresAt no later than the loss, so a holder that checks it before
// each write, as the README asks, stops there and never works beside the
// next holder (the chaos run's formats overlap: a claim refused under OOM,
// the value given back, and the holder working on to the provisional end).
func TestAHandedLockWhoseClaimIsRefusedIsOverWhenItGivesTheKeyBack(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		var refused *atomic.Int32
		h := queueWaitBehind(t, b, path, func(c *redis.Client) *gate { refused = refuseHeardClaims(c); return nil })
		require.NoError(t, h.holder.Release(ctx))
		got := await.Recv(t, h.acquired, "the waiter's Acquire, handed the key")
		require.NoError(t, got.err)
		lock := got.lock

		await.Recv(t, lock.Done(), "the Lock lost by its refused claim")
		require.ErrorIs(t, lock.Err(), ErrNotHeld)
		assert.NotZero(t, refused.Load(), "the claim was sent and refused")
		claimReturned(t, lock)
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "the provisional value given back")
		assert.False(t, lock.ExpiresAt().After(b.clock.Now()),
			"the lease is over once the key is given back, not %v later", lock.ExpiresAt().Sub(b.clock.Now()))
	})
}

// Release and Refresh of a Lock whose claim is in flight queue behind it
// in the Lock's turn, so whichever the caller sends first, the claim
// reaches Redis first; called after the claim returned, they find its
// value. Either way the Lock's own value is released or renewed, and
// nothing is left to a value nobody holds.
func TestReleaseAndRefreshOfAHandedLockRaceItsClaim(t *testing.T) {
	for _, order := range []string{"before the claim returns", "after the claim returns"} {
		t.Run(order, func(t *testing.T) {
			onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
				t.Run("Release", func(t *testing.T) {
					h := queueHeardWait(t, b, path)
					lock := h.handedOver(t)
					released := make(chan error, 1)
					if order == "after the claim returns" {
						h.claim.pass()
						claimReturned(t, lock)
					}
					go func() { released <- lock.Release(ctx) }()
					h.claim.pass()
					require.NoError(t, await.Recv(t, released, "the Release"))
					assert.Equal(t, "<missing>", b.value(t, "lock.k"), "released: the claim's value, or the provisional one")
					assert.Empty(t, b.queuedNow("lock.k"))
				})
				t.Run("Refresh", func(t *testing.T) {
					h := queueHeardWait(t, b, path)
					lock := h.handedOver(t)
					refreshed := make(chan error, 1)
					if order == "after the claim returns" {
						h.claim.pass()
						claimReturned(t, lock)
					}
					go func() { refreshed <- lock.Refresh(ctx, 20*time.Second) }()
					h.claim.pass()
					require.NoError(t, await.Recv(t, refreshed, "the Refresh"))
					assert.True(t, b.clock.Now().Add(20*time.Second).Equal(lock.ExpiresAt()), "the Refresh's lease, not the claim's: %v", lock.ExpiresAt())
					assert.Equal(t, lock.value, b.value(t, "lock.k"))
					stated, err := parseExpiry(lock.value)
					require.NoError(t, err)
					assert.True(t, lock.ExpiresAt().Equal(stated), "the key states the Refresh's end")
					require.NoError(t, lock.Release(ctx))
					assert.Equal(t, "<missing>", b.value(t, "lock.k"))
				})
			})
		})
	}
}

// A Release that waits for a claim held past the provisional end returns
// the loss then (H11); the claim that lands later is given back, so the
// key is never left to a value nobody holds for longer than the window.
func TestAReleaseBehindALateClaimLeavesNothingHeld(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		h := queueHeardWait(t, b, path)
		lock := h.handedOver(t)
		released := make(chan error, 1)
		go func() { released <- lock.Release(ctx) }()
		b.clock.Set(lock.ExpiresAt())
		require.ErrorIs(t, await.Recv(t, released, "the Release, at the provisional end"), ErrNotHeld)
		h.claim.pass()
		require.Eventually(t, func() bool { return b.value(t, "lock.k") == "<missing>" }, await.Timeout, time.Millisecond,
			"the late claim's lease is given back: %s", b.value(t, "lock.k"))
	})
}

// Mutual exclusion with handed locks held before their claims, on both
// queueing paths and both backends: every release hands over (no
// barging), and some Acquire calls return provisional holds.
func TestHandedLocksKeepMutualExclusionUnderContention(t *testing.T) {
	const workers, lockers, cycles = 8, 4, 40
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		var provisional atomic.Int64
		observer := ObserverFunc(func(e Event) {
			if e.Kind == EventAcquired && time.Until(e.ExpiresAt) <= claimWindow {
				provisional.Add(1)
			}
		})
		ls := make([]*Locker, lockers)
		for i := range ls {
			ls[i] = b.locker(t, path, WithClock(systemClock{}), WithStarvationThreshold(0), WithObserver(observer),
				WithBackoff(100*time.Microsecond, 2*time.Millisecond))
		}
		cs := contend(t, ls, workers, cycles, func() bool { return false })
		counted, overran := cs.counted()
		assert.Equal(t, workers*cycles, counted+overran)
		assert.Equal(t, 1, cs.most(), "two holders were inside the critical section at once")
		assert.Positive(t, provisional.Load(), "some locks were held on a handoff heard, before their claims")
		assert.Equal(t, "<missing>", b.value(t, "lock.stress"))
	})
}
