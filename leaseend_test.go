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

// H11: a lease is over when it says it is. A holder cut off from Redis is
// told of its loss at the end of the last lease Redis confirmed, by the
// Locker's clock, never after a round trip that may not return.

// cutOff, once armed, holds every command of a client before it is sent,
// until healed: a holder cut off from Redis while the others reach it.
type cutOff struct {
	mu      sync.Mutex
	armed   bool
	healed  chan struct{}
	holding chan struct{} // closed once a command is held
	once    sync.Once
}

func cutOffHook(t *testing.T, c *redis.Client) *cutOff {
	h := &cutOff{healed: make(chan struct{}), holding: make(chan struct{})}
	c.AddHook(h)
	t.Cleanup(h.heal) // a failed test must not strand the held commands
	return h
}

func (h *cutOff) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = true
}

func (h *cutOff) heal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.armed {
		h.armed = false
		close(h.healed)
	}
}

func (h *cutOff) hold() {
	h.mu.Lock()
	armed, healed := h.armed, h.healed
	h.mu.Unlock()
	if armed {
		h.once.Do(func() { close(h.holding) })
		<-healed // bounded: the test heals, or its cleanup does
	}
}

func (h *cutOff) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cutOff) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold()
		return next(ctx, cmd)
	}
}

func (h *cutOff) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold()
		return next(ctx, cmds)
	}
}

// An auto-refreshed holder whose renewal never returns is lost at its
// lease's end, while the renewal is still in flight; the renewal Redis
// applies later is freed, not believed.
func TestACutOffHolderIsToldOfItsLossAtTheLeaseEnd(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		client := b.client(t)
		cut := cutOffHook(t, client)
		lock, err := b.lockerOn(t, client, WithTTL(9*time.Second), WithAutoRefresh()).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		work := lock.Context(ctx)
		cut.arm()

		b.clock.Advance(3 * time.Second)
		await.Recv(t, cut.holding, "the first renewal, going out")
		b.clock.Advance(6 * time.Second) // the lease ends, the renewal in flight
		await.Recv(t, work.Done(), "the work's context cancelled at the lease's end, the renewal still in flight")
		require.ErrorIs(t, context.Cause(work), ErrNotHeld)
		require.ErrorIs(t, lock.Err(), ErrNotHeld)

		other, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "the next holder takes the key at the lease's end")
		cut.heal() // the renewal reaches Redis now: the key is no longer ours
		require.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
		assert.Equal(t, other.value, b.value(t, "lock.k"), "the late renewal left the next holder alone")
	})
}

// Release and Refresh of a held lock return at the lease's end, with the
// loss, when Redis does not answer, on every path.
func TestCallsOfACutOffHolderReturnAtTheLeaseEnd(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		defer noLockGoroutineLeft(t)
		client := b.client(t)
		cut := cutOffHook(t, client)
		l := b.lockerOn(t, client, p.opt)
		for _, call := range []struct {
			name string
			do   func(*Lock) error
		}{
			{"Release", func(k *Lock) error { return k.Release(ctx) }},
			{"Refresh", func(k *Lock) error { return k.Refresh(ctx, time.Minute) }},
		} {
			lock, err := l.TryAcquire(ctx, "lock."+call.name)
			require.NoError(t, err)
			cut.arm()
			returned := make(chan error, 1)
			go func() { returned <- call.do(lock) }()
			await.Recv(t, cut.holding, "%s, going out", call.name)
			b.clock.Set(lock.ExpiresAt())
			require.ErrorIs(t, await.Recv(t, returned, "%s, at the lease's end", call.name), ErrNotHeld)
			require.ErrorIs(t, lock.Err(), ErrNotHeld)
			cut.heal()
			cut = cutOffHook(t, client)
			b.clock.Advance(time.Minute) // past every safety net of this round
			_ = b.raw.Del(ctx, "lock."+call.name)
		}
	})
}

// The same through a real network partition: a default go-redis client
// (ContextTimeoutEnabled off, a 3s ReadTimeout) behind a frozen proxy, the
// system clock, and another Locker that reaches Redis. The holder's work
// is cancelled before the next holder's begins.
func TestAPartitionedHolderStopsBeforeTheNextHolderStarts(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		defer noLockGoroutineLeft(t)
		proxy := faultproxy.Start(t, b.addr)
		behind := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis's defaults, as the README's snippet
		t.Cleanup(func() { _ = behind.Close() })
		holderLocker, err := New(behind, WithTTL(600*time.Millisecond), WithAutoRefresh())
		require.NoError(t, err)
		t.Cleanup(func() { _ = holderLocker.Close() })
		nextLocker, err := New(b.client(t), WithTTL(time.Second), WithSkewMargin(100*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = nextLocker.Close() })

		lock, err := holderLocker.TryAcquire(ctx, "lock.partitioned")
		require.NoError(t, err)
		work := lock.Context(ctx)
		proxy.Freeze()
		t.Cleanup(proxy.Thaw)

		next, err := nextLocker.Acquire(await.Context(t), "lock.partitioned")
		require.NoError(t, err, "the next holder takes the key over once the lease has ended")
		select {
		case <-work.Done():
		default:
			t.Fatalf("the partitioned holder's work was still running when the next holder started (its lease ended at %s, now %s)",
				lock.ExpiresAt().Format(time.RFC3339Nano), time.Now().Format(time.RFC3339Nano))
		}
		require.ErrorIs(t, context.Cause(work), ErrNotHeld)
		proxy.Thaw()
		require.NoError(t, next.Release(ctx))
		await.Do(t, func() { _ = lock.Release(ctx) }, "the partitioned holder's Release once healed")
	})
}

// afterEach runs fn after every command or pipeline of a client returns.
type afterEach struct{ fn func() }

func (h afterEach) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h afterEach) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { err := next(ctx, cmd); h.fn(); return err }
}
func (h afterEach) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { err := next(ctx, cmds); h.fn(); return err }
}

// A Release whose answer is handled after the lease's end, where the loss
// was declared first, reports that loss: never nil beside an Err that says
// the lock was lost.
func TestAReleaseAnsweredAfterTheLossReportsIt(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		l := b.lockerOn(t, client)
		var armed atomic.Pointer[Lock]
		client.AddHook(afterEach{fn: func() {
			if lock := armed.Swap(nil); lock != nil { // Release's round trip has been answered
				b.clock.Set(lock.ExpiresAt())
				lock.endIfRunOut() // the keeper, at the lease's end
			}
		}})
		for round := range 20 { // the answer and the lease's end reach Release in either order
			lock, err := l.TryAcquire(ctx, "lock.k")
			require.NoError(t, err)
			armed.Store(lock)
			released := lock.Release(ctx)
			require.ErrorIs(t, lock.Err(), ErrNotHeld)
			require.ErrorIs(t, released, ErrNotHeld, "round %d: Release agrees with Err", round)
			b.clock.Advance(time.Hour)
			_ = b.raw.Del(ctx, "lock.k")
		}
	})
}

// Once Done has reported the loss, Release and Refresh say so at once,
// even while a round trip the lease's end left in flight holds the Lock's
// turn (go-redis may keep it for its ReadTimeout and retries).
func TestCallsAfterTheLossDoNotWaitForARoundTripInFlight(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		cut := cutOffHook(t, client)
		lock, err := b.lockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		cut.arm()
		refreshed := make(chan error, 1)
		go func() { refreshed <- lock.Refresh(ctx, time.Minute) }()
		await.Recv(t, cut.holding, "the Refresh, going out")
		b.clock.Set(lock.ExpiresAt())
		require.ErrorIs(t, await.Recv(t, refreshed, "the Refresh, at the lease's end"), ErrNotHeld)

		for name, call := range map[string]func(context.Context) error{
			"Release": lock.Release,
			"Refresh": func(ctx context.Context) error { return lock.Refresh(ctx, time.Minute) },
		} {
			returned := make(chan error, 1)
			go func() { returned <- call(await.Context(t)) }()
			assert.ErrorIs(t, await.Recv(t, returned, "%s of a lost lock, with the turn still taken", name), ErrNotHeld, name)
		}
		cut.heal()
	})
}

// Refresh and Release racing the lease's end and each other agree with Err
// whichever comes first: a Refresh that returns nil has renewed a lock
// that is still held, a Release that returns nil has released one that was
// not lost.
func TestCallsRacingTheLeaseEndAgreeWithErr(t *testing.T) {
	b := newBackend(t, "miniredis", startMiniredis(t))
	client := b.client(t)
	l := b.lockerOn(t, client)
	var lockNow atomic.Pointer[Lock]
	client.AddHook(afterEach{fn: func() {
		if k := lockNow.Swap(nil); k != nil {
			b.clock.Set(k.ExpiresAt()) // the first answer comes as the lease ends
		}
	}})
	for round := range 200 {
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		_ = lock.Done() // a keeper, which declares the loss at the lease's end
		before := lock.ExpiresAt()
		lockNow.Store(lock)
		refreshed := make(chan error, 1)
		go func() { refreshed <- lock.Refresh(ctx, time.Minute) }()
		released := lock.Release(ctx)
		renewed := await.Recv(t, refreshed, "round %d's Refresh", round)
		if released == nil {
			require.NoError(t, lock.Err(), "round %d: Release said nil, Err says lost", round)
		}
		if renewed == nil {
			require.NoError(t, lock.Err(), "round %d: Refresh said nil on a lost lock", round)
			require.True(t, lock.ExpiresAt().After(before), "round %d: Refresh said nil and renewed nothing", round)
		}
		b.clock.Advance(time.Hour)
		_ = b.raw.Del(ctx, "lock.k")
	}
}

// H11: a round trip that fails once the lease has run out reports the
// loss, whichever goroutine declared the loss: the
// call itself, or the keeper watching the lease's end. (A clean-clone CI
// run saw a Refresh return its replicas' late acknowledgement without
// ErrNotHeld: the keeper had declared the loss, and the call's answer
// was picked before the lease's end.)
func TestAFailureAfterTheLeaseRanOutReportsTheLoss(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		for i := range 20 { // the call's select picks among ready cases at random
			lock, err := b.locker(t).TryAcquire(ctx, "lock.k")
			require.NoError(t, err)
			err = lock.inTurn(ctx, "refresh", func() error {
				b.clock.Set(lock.ExpiresAt())
				assert.True(t, lock.endIfRunOut(), "the keeper's part: the loss declared on another goroutine")
				return errLostReply{}
			}, lock.lostWith("refresh"))
			// The loss, always. The round trip's own error comes with it only
			// when its answer was in before the call saw the loss: H11 never
			// waits for a round trip once the lease is over.
			require.ErrorIs(t, err, ErrNotHeld, "run %d: the loss", i)
		}
	})
}
