package setnxlock

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/redistest"
)

// clockStart is where a test's ManualClock starts: the current second. A
// ManualClock that starts at a fixed date agrees with real time only until
// the real date moves past it, and a test that lets a Locker on the system
// clock share its keys then fails, or hangs, from that day on. So every
// ManualClock starts now (truncated to the second, so that the seconds
// formats round at known points), and tests state instants relative to
// its start. internal/testrules rejects date literals in tests.
func clockStart() time.Time { return time.Now().UTC().Truncate(time.Second) }

// backend is one Redis server the behaviour tests run against: an embedded
// miniredis, or a real redis-server process started for the test.
type backend struct {
	name  string
	addr  string
	start time.Time // where clock started
	clock *ManualClock
	raw   *redis.Client        // for arranging and inspecting keys behind the Lockers' backs
	mini  *miniredis.Miniredis // the embedded server, whose expiries follow serverSleep; nil for redis-server
}

// onEachBackend runs the scenario once on miniredis and once on a real
// redis-server, each with its own ManualClock.
func onEachBackend(t *testing.T, scenario func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		m := startMiniredisServer(t)
		b := newBackend(t, "miniredis", m.Addr())
		b.mini = m
		scenario(t, b)
	})
	t.Run("redis-server", func(t *testing.T) {
		scenario(t, newBackend(t, "redis-server", redistest.Start(t).Addr()))
	})
}

// serverSleep lets d pass for the server's key expiries: miniredis never
// expires keys in real time, so it is fast-forwarded; a redis-server counts
// real time.
func (b *backend) serverSleep(d time.Duration) {
	if b.mini != nil {
		b.mini.FastForward(d)
		return
	}
	time.Sleep(d)
}

func startMiniredis(t *testing.T) string { return startMiniredisServer(t).Addr() }

// startMiniredisServer is for tests that move miniredis's own TTL clock.
func startMiniredisServer(t *testing.T) *miniredis.Miniredis { return miniredis.RunT(t) }

func newBackend(t *testing.T, name, addr string) *backend {
	start := clockStart()
	b := &backend{name: name, addr: addr, start: start, clock: NewManualClock(start)}
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
// a TTL of 10s and fast backoff; opts override these. It takes the path
// users get by default (scripts, the queue); a test about the commands of
// another path asks for it (WithoutScripts, WithClassicCommands), and
// paths_test.go runs the behaviour on every path.
func (b *backend) locker(t testing.TB, opts ...Option) *Locker {
	return b.lockerOn(t, b.client(t), opts...)
}

// classicLocker is locker on the classic path (WithClassicCommands): SETNX,
// GET, PEXPIRE and WATCH/MULTI/EXEC, which the hazard tests of the SETNX
// page's steps inspect and intercept command by command.
func (b *backend) classicLocker(t testing.TB, opts ...Option) *Locker {
	return b.classicLockerOn(t, b.client(t), opts...)
}

func (b *backend) classicLockerOn(t testing.TB, client redis.UniversalClient, opts ...Option) *Locker {
	return b.lockerOn(t, client, append([]Option{WithClassicCommands()}, opts...)...)
}

func (b *backend) lockerOn(t testing.TB, client redis.UniversalClient, opts ...Option) *Locker {
	t.Helper()
	base := []Option{WithClock(b.clock), WithTTL(10 * time.Second), WithBackoff(time.Millisecond, 5*time.Millisecond)}
	l, err := New(client, append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() }) // before its client closes: cleanups run last first
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
	b.crashedHolderOf(t, key, b.locker(t))
}

// classicCrashedHolder is crashedHolder on the classic path.
func (b *backend) classicCrashedHolder(t testing.TB, key string) {
	t.Helper()
	b.crashedHolderOf(t, key, b.classicLocker(t))
}

func (b *backend) crashedHolderOf(t testing.TB, key string, l *Locker) {
	t.Helper()
	lock, err := l.TryAcquire(context.Background(), key)
	require.NoError(t, err)
	b.clock.Set(lock.ExpiresAt())
}

// racer is a client racing for an expired lock. It is stopped right after
// the GET that showed it the expired value, before it acts on it, so the
// test decides what happens in between; from then on its replies can be
// lost, so that it cannot clean up after itself.
type racer struct {
	sawExpired *gate
	lost       *lostReplies
	done       chan error
}

// startRacer starts a TryAcquire of key on a new client on path p and
// waits until it has read the expired value: the reply of the acquire
// script, which the takeover script then checks again, or the GET of its
// takeover's watch.
func (b *backend) startRacer(t *testing.T, key string, p lockPath) *racer {
	t.Helper()
	client := b.client(t)
	// Stopped once it has seen the expired value, before its takeover:
	saw := func() *gate { return gateAfter(t, client, "get", 2) } // classic: the claim's GET, then the watch's
	switch p.name {
	case "scripts":
		saw = func() *gate { return gateAfter(t, client, "set", 1) } // the claim's SET NX PX GET; the takeover is a script
	case "commands":
		saw = func() *gate { return gateAfter(t, client, "get", 1) } // after the claim's SET NX PX GET, the watch's GET
	}
	r := &racer{sawExpired: saw(), lost: loseReplies(client), done: make(chan error, 1)}
	l := b.lockerOn(t, client, p.opt)
	warm(t, l)
	go func() { _, err := l.TryAcquire(context.Background(), key); r.done <- err }()
	r.sawExpired.wait(t)
	return r
}

func (b *backend) set(t testing.TB, key, value string) {
	t.Helper()
	require.NoError(t, b.raw.Set(context.Background(), key, value, 0).Err())
}

// recorder is a go-redis hook that records the commands a client sends,
// and which of the library's scripts each EVALSHA or EVAL runs.
type recorder struct {
	mu      sync.Mutex
	cmds    []string
	scripts []string
	args    [][]any // each command's arguments, its name first
}

// scriptNames names the library's scripts by their SHA1, as EVALSHA sends it.
var scriptNames = map[string]string{
	acquireScript.Hash(): "acquire", queuedScript.Hash(): "queued",
	releaseScript.Hash(): "release", leaveScript.Hash(): "leave", claimScript.Hash(): "claim",
	takeoverScript.Hash(): "takeover",
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
			continue
		case "evalsha":
			r.cmds = append(r.cmds, "EVALSHA")
			r.scripts = append(r.scripts, scriptNames[fmt.Sprint(cmd.Args()[1])])
		default:
			r.cmds = append(r.cmds, strings.ToUpper(cmd.Name()))
		}
		r.args = append(r.args, cmd.Args())
	}
}

// mentioning returns the names of the commands recorded so far that had
// arg among their arguments (a key, say), in order.
func (r *recorder) mentioning(arg string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for i, args := range r.args {
		for _, a := range args {
			if a == arg {
				names = append(names, r.cmds[i])
				break
			}
		}
	}
	return names
}

// reset forgets the commands recorded so far.
func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds, r.scripts, r.args = nil, nil, nil
}

// scriptsRun returns the library's scripts run so far by EVALSHA, e.g.
// "acquire queued release".
func (r *recorder) scriptsRun() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.scripts, " ")
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
		if !isTransactionCheck(cmds) {
			r.add(cmds...)
		}
		return next(ctx, cmds)
	}
}

// hookFunc wraps one named command, sent alone or in a pipeline, letting a
// test interleave clients at exact points or lose a reply after the server
// applied the command.
type hookFunc struct {
	name string
	// around receives the next step; it decides when and whether to send
	// the command and what to report.
	around func(send func() error) error
}

func hookCommand(c *redis.Client, name string, around func(send func() error) error) {
	c.AddHook(hookFunc{name: name, around: around})
}

func (h hookFunc) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hookFunc) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != h.name {
			return next(ctx, cmd)
		}
		return h.around(func() error { return next(ctx, cmd) })
	}
}

func (h hookFunc) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if isTransactionCheck(cmds) {
			return next(ctx, cmds)
		}
		for _, cmd := range cmds {
			if cmd.Name() == h.name {
				return h.around(func() error { return next(ctx, cmds) })
			}
		}
		return next(ctx, cmds)
	}
}

// gate stops a client at one of its commands until the test opens it, so
// that other clients can run in between.
type gate struct {
	arrived chan struct{}
	open    chan struct{}
	once    sync.Once
}

// gateBefore stops the client before it sends its n-th command of that name.
func gateBefore(t *testing.T, c *redis.Client, name string, n int) *gate {
	return newGate(t, c, name, n, true)
}

// gateAfter stops the client after its n-th command of that name has been
// answered, before the client sees the reply.
func gateAfter(t *testing.T, c *redis.Client, name string, n int) *gate {
	return newGate(t, c, name, n, false)
}

func newGate(t *testing.T, c *redis.Client, name string, n int, before bool) *gate {
	g := &gate{arrived: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.pass) // a failed test must not strand the gated client
	var seen atomic.Int64
	hookCommand(c, name, func(send func() error) error {
		if seen.Add(1) != int64(n) {
			return send()
		}
		var err error
		if !before {
			err = send()
		}
		close(g.arrived)
		<-g.open // bounded: the test passes the gate, or its cleanup does
		if before {
			err = send()
		}
		return err
	})
	return g
}

// wait blocks until the gated client has reached its command.
func (g *gate) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("gated client never reached its command")
	}
}

// pass lets the gated client go on.
func (g *gate) pass() { g.once.Do(func() { close(g.open) }) }

// errLostReply stands for a reply lost after the server applied the command.
type errLostReply struct{}

func (errLostReply) Error() string   { return "read tcp: i/o timeout (injected: reply lost)" }
func (errLostReply) Timeout() bool   { return true }
func (errLostReply) Temporary() bool { return true }

var _ net.Error = errLostReply{}

// loseReply makes the client's first command of that name (alone or in a
// pipeline) reach the server and be applied, but report a timeout instead
// of the reply (H5).
func loseReply(c *redis.Client, name string) { loseNthReply(c, name, 1) }

// loseNthReply loses the reply of the n-th command called name, once.
func loseNthReply(c *redis.Client, name string, n int64) {
	var seen atomic.Int64
	hookCommand(c, name, func(send func() error) error {
		err := send()
		if seen.Add(1) == n {
			err = errLostReply{}
		}
		return err
	})
}

// lostReplies, once armed, lets every command of a client reach the server
// but loses every reply: a network that fails after delivery.
type lostReplies struct{ armed atomic.Bool }

func loseReplies(c *redis.Client) *lostReplies {
	l := &lostReplies{}
	c.AddHook(l)
	return l
}

func (l *lostReplies) arm() { l.armed.Store(true) }

func (l *lostReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lostReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); !l.armed.Load() {
			return err
		}
		return errLostReply{}
	}
}

func (l *lostReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := next(ctx, cmds); !l.armed.Load() {
			return err
		}
		return errLostReply{}
	}
}

// watchIgnored plays a server or proxy that answers WATCH with OK and
// ignores it: the WATCH never reaches the server, alone or in a pipeline.
type watchIgnored struct{}

func (watchIgnored) DialHook(next redis.DialHook) redis.DialHook { return next }

func (watchIgnored) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "watch" {
			cmd.(*redis.StatusCmd).SetVal("OK")
			return nil
		}
		return next(ctx, cmd)
	}
}

func (watchIgnored) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var sent []redis.Cmder
		for _, cmd := range cmds {
			if cmd.Name() == "watch" {
				cmd.(*redis.StatusCmd).SetVal("OK")
				continue
			}
			sent = append(sent, cmd)
		}
		return next(ctx, sent)
	}
}

// isTransactionCheck recognises the empty MULTI/EXEC a Locker sends once
// before its first watched write (checkTransactions). The tests that hook,
// gate or record commands are about the writes that follow it.
func isTransactionCheck(cmds []redis.Cmder) bool {
	return len(cmds) == 2 && cmds[0].Name() == "multi" && cmds[1].Name() == "exec"
}
