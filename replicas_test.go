package setnxlock

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// WithReplicas on real redis-server processes: a primary with one replica
// of its own, and a primary with none. miniredis does not replicate.
// failover_test.go runs it through a Sentinel failover.

// replicated is a primary and one replica, with clients to both.
type replicated struct {
	primary, replica     *redistest.Server
	onPrimary, onReplica *redis.Client
	clock                *ManualClock
}

func startReplicated(t *testing.T) *replicated {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	r := &replicated{primary: primary, replica: replica, clock: NewManualClock(clockStart())}
	r.onPrimary = redis.NewClient(&redis.Options{Addr: primary.Addr(), MaxRetries: -1})
	r.onReplica = redis.NewClient(&redis.Options{Addr: replica.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = r.onPrimary.Close(); _ = r.onReplica.Close() })
	// Writes of its own: WAIT after none is answered at once, and after a
	// diskless sync the primary streams to the replica only once it has
	// acknowledged (about a second later). One acknowledged write was not
	// enough: a clean-clone CI run saw the replica acknowledge the probe
	// and then nothing for a second, failing every path's first grant.
	// Five acknowledged in a row, each within 100ms, show it streaming.
	inARow := 0
	require.Eventually(t, func() bool {
		acked := 0
		if r.onPrimary.Set(ctx, "replication.probe", "1", 0).Err() == nil {
			acked, _ = r.onPrimary.Do(ctx, "wait", 1, 100).Int()
		}
		if acked != 1 {
			inARow = 0
			return false
		}
		inARow++
		return inARow == 5
	}, 10*time.Second, 10*time.Millisecond, "the replica to sync with its primary and acknowledge five writes in a row")
	return r
}

// locker is a Locker on the primary, asking one replica to acknowledge.
func (r *replicated) locker(t *testing.T, opts ...Option) *Locker {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: r.primary.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	base := []Option{WithClock(r.clock), WithTTL(10 * time.Second), WithBackoff(time.Millisecond, 5*time.Millisecond), WithReplicas(1, 200*time.Millisecond)}
	l, err := New(client, append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// onReplica reads key on the replica itself.
func (r *replicated) onReplicaValue(t *testing.T, key string) string {
	t.Helper()
	v, err := r.onReplica.Get(ctx, key).Result()
	if err == redis.Nil {
		return "<missing>"
	}
	require.NoError(t, err)
	return v
}

// When a lease is granted, the replica has it: SETNX or SET NX, a
// takeover, and each renewal, on every path.
func TestWithReplicasGrantsOnlyLeasesTheReplicaHas(t *testing.T) {
	r := startReplicated(t)
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			key := "lock.replicated." + p.name
			holder := r.locker(t, p.opt)
			lock, err := holder.TryAcquire(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, lock.value, r.onReplicaValue(t, key), "the replica had the lease when it was granted")

			r.clock.Advance(time.Second)
			require.NoError(t, lock.Refresh(ctx, 10*time.Second))
			assert.Equal(t, lock.value, r.onReplicaValue(t, key), "and each renewal")

			r.clock.Set(lock.ExpiresAt()) // the holder crashed
			taker, err := r.locker(t, p.opt).TryAcquire(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, taker.value, r.onReplicaValue(t, key), "and a takeover")
			require.NoError(t, taker.Release(ctx))
		})
	}
}

// A replica that stops acknowledging (stalled, here with SIGSTOP) fails
// a renewal, which keeps the earlier end, and every acquisition (SETNX or
// SET NX, a takeover), which is undone; all work again once it
// acknowledges. On every path.
func TestWithReplicasFailsWhatTheReplicaDoesNotAcknowledge(t *testing.T) {
	r := startReplicated(t)
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			key, free, crashed := "lock.stalled."+p.name, "lock.free."+p.name, "lock.crashed."+p.name
			holder := r.locker(t, p.opt)
			lock, err := holder.TryAcquire(ctx, key)
			require.NoError(t, err)
			ends := lock.ExpiresAt()
			old := r.locker(t, p.opt, WithTTL(time.Second))
			_, err = old.TryAcquire(ctx, crashed) // its holder crashes
			require.NoError(t, err)
			crashedValue := r.onReplicaValue(t, crashed)

			r.replica.Pause()
			r.clock.Advance(time.Second)
			err = lock.Refresh(ctx, 10*time.Second)
			assert.ErrorIs(t, err, ErrNotReplicated)
			assert.ErrorContains(t, err, "0 of 1 replicas acknowledged")
			assert.Equal(t, ends, lock.ExpiresAt(), "an unacknowledged renewal is not believed")
			assert.NoError(t, lock.Err(), "nor is it a loss: it is retried")

			_, err = holder.TryAcquire(ctx, free)
			assert.ErrorIs(t, err, ErrNotReplicated)
			assert.Equal(t, int64(0), r.onPrimary.Exists(ctx, free).Val(), "the unacknowledged acquisition was undone")
			_, err = holder.TryAcquire(ctx, crashed)
			assert.ErrorIs(t, err, ErrNotReplicated, "the takeover of an expired lease too")
			assert.Equal(t, int64(0), r.onPrimary.Exists(ctx, crashed).Val(), "the unacknowledged takeover was undone")

			r.replica.Resume()
			require.NoError(t, lock.Refresh(ctx, 10*time.Second))
			assert.True(t, lock.ExpiresAt().After(ends))
			assert.Equal(t, lock.value, r.onReplicaValue(t, key))
			other, err := holder.TryAcquire(ctx, free)
			require.NoError(t, err)
			require.NoError(t, other.Release(ctx))
			require.NoError(t, lock.Release(ctx))
			assert.NotEqual(t, crashedValue, r.onReplicaValue(t, crashed))
		})
	}
}

// On a server without replicas every acquisition fails at once with a
// clear error, leaving nothing behind; Acquire retries until its context
// ends and then says why.
func TestWithReplicasOnAServerWithoutReplicas(t *testing.T) {
	server := redistest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: server.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: server.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = client.Close() })
			l, err := New(client, p.opt, WithFencing(), WithReplicas(1, 20*time.Millisecond))
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })

			_, err = l.TryAcquire(ctx, "lock.alone")
			require.ErrorIs(t, err, ErrNotReplicated)
			assert.Contains(t, err.Error(), `"lock.alone": 0 of 1 replicas acknowledged within 20ms`)
			assert.Equal(t, int64(0), raw.Exists(ctx, "lock.alone").Val(), "the lock is not left behind")

			waitCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_, err = l.Acquire(waitCtx, "lock.alone")
			assert.ErrorIs(t, err, ErrNotAcquired)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.ErrorIs(t, err, ErrNotReplicated, "Acquire says why it never got the lock")
			assert.Equal(t, int64(0), raw.Exists(ctx, "lock.alone").Val())
		})
	}
}

// Bad input is refused by New, before anything is sent.
func TestWithReplicasRefusesWhatCannotWork(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: time.Second})
	t.Cleanup(func() { _ = client.Close() })
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opt    Option
		says   string
	}{
		{"no replica", client, WithReplicas(0, time.Millisecond), "at least 1 replica"},
		{"a timeout below 1ms", client, WithReplicas(1, time.Microsecond), "below 1ms"},
		{"a timeout the client's reads do not outlast", client, WithReplicas(1, time.Second), "ReadTimeout"},
		{"a Cluster client", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), WithReplicas(1, time.Millisecond), "one primary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.client, tc.opt)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.ErrorContains(t, err, tc.says)
		})
	}
}

// sendTo is a go-redis hook that sends every pipeline holding a command
// named name to another server instead, as go-redis's resend of a pipeline
// whose reply was lost lands, through a failover client, on the promoted
// replica.
type sendTo struct {
	name  string
	other *redis.Client
}

func (h sendTo) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h sendTo) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h sendTo) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == h.name }) {
			return next(ctx, cmds)
		}
		_, err := h.other.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, c := range cmds {
				_ = pipe.Process(ctx, c)
			}
			return nil
		})
		return err
	}
}

// The WAIT is believed only from the server that holds our write: when the
// connection it goes on reaches another primary (whose own replica would
// acknowledge at once a connection that wrote nothing there), the watched
// write WAIT counts finds no value of ours there, and nothing is granted.
// On every path. WAIT follows that write on its connection, which go-redis
// never re-dials inside a transaction.
func TestWithReplicasCountsOnlyTheServerThatHoldsOurWrite(t *testing.T) {
	r, elsewhere := startReplicated(t), startReplicated(t)
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			l := r.locker(t, p.opt)
			l.client.(*redis.Client).AddHook(sendTo{name: "watch", other: elsewhere.onPrimary})
			_, err := l.TryAcquire(ctx, "lock.moved."+p.name)
			assert.ErrorIs(t, err, ErrNotReplicated)
			assert.ErrorIs(t, err, errNotOurs)
			assert.Equal(t, int64(0), elsewhere.onPrimary.Exists(ctx, "lock.moved."+p.name).Val(), "nothing is written where our write is not")
		})
	}
}

// A renewal acknowledged only after the old lease ended (here the clock
// jumps while WAIT waits) is not believed: a promoted replica without it
// would have let a contender in at the old end. WAIT itself never waits
// past that end, and the lock is lost at that end (H11): Refresh says so
// whether WAIT's reply or the lease's end comes first.
func TestWithReplicasBelievesNoRenewalAcknowledgedAfterTheLeaseEnded(t *testing.T) {
	r := startReplicated(t)
	l := r.locker(t)
	lock, err := l.TryAcquire(ctx, "lock.late")
	require.NoError(t, err)
	ends := lock.ExpiresAt()

	r.clock.Set(ends.Add(-30 * time.Millisecond))
	var waitArgs []any
	hookCommand(l.client.(*redis.Client), "wait", func(send func() error) error {
		r.clock.Set(ends) // the acknowledgement arrives as the old lease ends
		return send()
	})
	l.client.(*redis.Client).AddHook(argsOf{name: "wait", args: &waitArgs})
	err = lock.Refresh(ctx, 10*time.Second)
	assert.ErrorIs(t, err, ErrNotHeld)
	assert.ErrorIs(t, lock.Err(), ErrNotHeld, "lost at the old lease's end")
	assert.Equal(t, ends, lock.ExpiresAt(), "the renewal is not believed")
	require.NoError(t, lock.lockOp(await.Context(t), "test"), "the renewal's round trip, which goes on past the lease's end, returning")
	lock.unlockOp()
	require.Len(t, waitArgs, 3)
	assert.Equal(t, int64(30), waitArgs[2], "WAIT waits no longer than the lease has left")
}

// argsOf records the arguments of the last command named name.
type argsOf struct {
	name string
	args *[]any
}

func (h argsOf) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h argsOf) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == h.name {
			*h.args = cmd.Args()
		}
		return next(ctx, cmd)
	}
}
func (h argsOf) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == h.name {
				*h.args = cmd.Args()
			}
		}
		return next(ctx, cmds)
	}
}

// A win whose WAIT was lost on the network and whose undo failed too is
// remembered as our own write (H5): Acquire takes it as soon as the
// network is back, instead of waiting out its own lease.
func TestWithReplicasRemembersAWinItCouldNeitherConfirmNorUndo(t *testing.T) {
	r := startReplicated(t)
	l := r.locker(t, WithBackoff(time.Millisecond, 20*time.Millisecond))
	var mu sync.Mutex
	var downUntil time.Time
	faulted := false
	hookCommand(l.client.(*redis.Client), "wait", func(send func() error) error {
		mu.Lock()
		defer mu.Unlock()
		if faulted {
			return send()
		}
		faulted = true
		downUntil = time.Now().Add(300 * time.Millisecond)
		_ = send()
		return errLostReply{}
	})
	hookCommand(l.client.(*redis.Client), "watch", func(send func() error) error { // the undo's transaction
		mu.Lock()
		down := time.Now().Before(downUntil)
		mu.Unlock()
		if down {
			return errLostReply{}
		}
		return send()
	})
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lock, err := l.Acquire(actx, "lock.unconfirmed")
	require.NoError(t, err, "Acquire takes its own unconfirmed win once the network is back")
	assert.Equal(t, lock.value, r.onReplicaValue(t, "lock.unconfirmed"))
	require.NoError(t, lock.Release(ctx))
}
