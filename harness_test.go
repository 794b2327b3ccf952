package setnxlock

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/redistest"
)

// epoch is where every ManualClock in the tests starts.
var epoch = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// backend is one Redis server the behaviour tests run against: an embedded
// miniredis, or a real redis-server process started for the test.
type backend struct {
	name  string
	addr  string
	clock *ManualClock
	raw   *redis.Client // for arranging and inspecting keys behind the Lockers' backs
}

// onEachBackend runs the scenario once on miniredis and once on a real
// redis-server, each with its own ManualClock.
func onEachBackend(t *testing.T, scenario func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		scenario(t, newBackend(t, "miniredis", startMiniredis(t)))
	})
	t.Run("redis-server", func(t *testing.T) {
		scenario(t, newBackend(t, "redis-server", redistest.Start(t).Addr()))
	})
}

func startMiniredis(t *testing.T) string { return miniredis.RunT(t).Addr() }

func newBackend(t *testing.T, name, addr string) *backend {
	b := &backend{name: name, addr: addr, clock: NewManualClock(epoch)}
	b.raw = b.client(t)
	return b
}

// client returns a new go-redis client of its own (its own pool), so that
// several Lockers behave like separate processes.
func (b *backend) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: b.addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// locker returns a Locker on a new client with the backend's ManualClock,
// a TTL of 10s and fast backoff; opts override these.
func (b *backend) locker(t testing.TB, opts ...Option) *Locker {
	return b.lockerOn(t, b.client(t), opts...)
}

func (b *backend) lockerOn(t testing.TB, client redis.UniversalClient, opts ...Option) *Locker {
	t.Helper()
	base := []Option{WithClock(b.clock), WithTTL(10 * time.Second), WithBackoff(time.Millisecond, 5*time.Millisecond)}
	l, err := New(client, append(base, opts...)...)
	require.NoError(t, err)
	return l
}

// value returns what the key holds, or "<missing>".
func (b *backend) value(t testing.TB, key string) string {
	t.Helper()
	v, err := b.raw.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return "<missing>"
	}
	require.NoError(t, err)
	return v
}

// crashedHolder takes key with a Locker that never releases it, then moves
// the clock to the instant its lease ends.
func (b *backend) crashedHolder(t testing.TB, key string) {
	t.Helper()
	lock, err := b.locker(t).TryAcquire(context.Background(), key)
	require.NoError(t, err)
	b.clock.Set(lock.ExpiresAt())
}

// racer is a client racing for an expired lock, stopped before its GETSET
// and before the WATCH of its restore, so the test decides the interleaving.
type racer struct {
	getset, restore *gate
	done            chan error
}

// startRacer starts a TryAcquire of key on a new client and waits until it
// has read the expired value and is about to send GETSET.
func (b *backend) startRacer(t *testing.T, key string) *racer {
	t.Helper()
	client := b.client(t)
	r := &racer{getset: gateBefore(t, client, "getset", 1), restore: gateBefore(t, client, "watch", 1), done: make(chan error, 1)}
	l := b.lockerOn(t, client)
	go func() { _, err := l.TryAcquire(context.Background(), key); r.done <- err }()
	r.getset.wait(t)
	return r
}

func (b *backend) set(t testing.TB, key, value string) {
	t.Helper()
	require.NoError(t, b.raw.Set(context.Background(), key, value, 0).Err())
}

// recorder is a go-redis hook that records the commands a client sends.
type recorder struct {
	mu   sync.Mutex
	cmds []string
}

func record(c *redis.Client) *recorder {
	r := &recorder{}
	c.AddHook(r)
	return r
}

func (r *recorder) add(cmds ...redis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cmd := range cmds {
		switch cmd.Name() {
		case "hello", "client", "auth", "select": // connection setup, not our algorithm
		default:
			r.cmds = append(r.cmds, strings.ToUpper(cmd.Name()))
		}
	}
}

// reset forgets the commands recorded so far.
func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds = nil
}

// names returns the commands sent so far, e.g. "SETNX GET GETSET".
func (r *recorder) names() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.cmds, " ")
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add(cmd)
		return next(ctx, cmd)
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.add(cmds...)
		return next(ctx, cmds)
	}
}

// hookFunc runs before (and optionally instead of returning) one named
// command, letting a test interleave clients at exact points or lose a
// reply after the server applied the command.
type hookFunc struct {
	name string
	// around receives the command and the next step; it decides when and
	// whether to send it and what to report.
	around func(ctx context.Context, cmd redis.Cmder, send func() error) error
}

func hookCommand(c *redis.Client, name string, around func(ctx context.Context, cmd redis.Cmder, send func() error) error) {
	c.AddHook(hookFunc{name: name, around: around})
}

func (h hookFunc) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hookFunc) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != h.name {
			return next(ctx, cmd)
		}
		return h.around(ctx, cmd, func() error { return next(ctx, cmd) })
	}
}

func (h hookFunc) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// gate pauses a client before its n-th command of one name until the test
// opens it, so that other clients can run in between.
type gate struct {
	arrived chan struct{}
	open    chan struct{}
	once    sync.Once
}

func gateBefore(t *testing.T, c *redis.Client, name string, n int) *gate {
	g := &gate{arrived: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.pass) // a failed test must not strand the gated client
	var mu sync.Mutex
	seen := 0
	hookCommand(c, name, func(ctx context.Context, cmd redis.Cmder, send func() error) error {
		mu.Lock()
		seen++
		hold := seen == n
		mu.Unlock()
		if hold {
			close(g.arrived)
			<-g.open
		}
		return send()
	})
	return g
}

// wait blocks until the gated client has reached the command.
func (g *gate) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("gated client never reached its command")
	}
}

// pass lets the gated client send its command.
func (g *gate) pass() { g.once.Do(func() { close(g.open) }) }

// errLostReply stands for a reply lost after the server applied the command.
type errLostReply struct{}

func (errLostReply) Error() string   { return "read tcp: i/o timeout (injected: reply lost)" }
func (errLostReply) Timeout() bool   { return true }
func (errLostReply) Temporary() bool { return true }

var _ net.Error = errLostReply{}

// loseReply makes the client's first command of that name reach the server
// and be applied, but report a timeout instead of the reply (H5).
func loseReply(c *redis.Client, name string) {
	var once sync.Once
	hookCommand(c, name, func(ctx context.Context, cmd redis.Cmder, send func() error) error {
		err := send()
		once.Do(func() { err = errLostReply{} })
		return err
	})
}
