package setnxlock

import (
	"context"
	"sync"
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
