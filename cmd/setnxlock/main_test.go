package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// The tests run the built binary as a real process against a redis-server
// each test starts on a free loopback port, as cron or a script would.

// binary is the setnxlock built once by TestMain, with the race detector.
var binary string

func TestMain(m *testing.M) {
	if os.Getenv(subreaperEnv) != "" {
		execAsSubreaper() // this process is a wrapper, not the tests
	}
	// The binaries the tests start must see SIGHUP and SIGINT as a shell
	// would give them, whatever this process was started with: under
	// nohup, or as a background job of a script, they arrive ignored, and
	// an ignored signal stays ignored across exec (which setnxlock run
	// honours). A caught one is reset to its default by exec, so catching
	// them here gives every child the default.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP, syscall.SIGINT)
	dir, err := os.MkdirTemp("", "setnxlock-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "setnxlock")
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building setnxlock:", err)
		os.Exit(1)
	}
	// A race-enabled binary sleeps 1s at exit to let reports finish unless told not to.
	if err := os.Setenv("GORACE", "atexit_sleep_ms=0 halt_on_error=1"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// server is a redis-server for one test, with a client to arrange and
// inspect keys behind the CLI's back.
type server struct {
	addr string // host:port
	url  string
	raw  *redis.Client
}

func startServer(t *testing.T) *server {
	t.Helper()
	s := redistest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	return &server{addr: s.Addr(), url: "redis://" + s.Addr() + "/0", raw: raw}
}

// locker is a library Locker on the test's server, for holding keys the
// way another machine's setnxlock would.
func (s *server) locker(t *testing.T, opts ...setnxlock.Option) *setnxlock.Locker {
	t.Helper()
	l, err := setnxlock.New(s.raw, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// hold takes key for the test with a lease of ttl.
func (s *server) hold(t *testing.T, key string, ttl time.Duration) *setnxlock.Lock {
	t.Helper()
	lock, err := s.locker(t, setnxlock.WithTTL(ttl)).TryAcquire(await.Context(t), key)
	if err != nil {
		t.Fatalf("holding %q: %v", key, err)
	}
	return lock
}

// value returns what key holds, or "<missing>".
func (s *server) value(t *testing.T, key string) string {
	t.Helper()
	v, err := s.raw.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return "<missing>"
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// proc is one setnxlock process.
type proc struct {
	cmd    *exec.Cmd
	start  time.Time
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed

	mu             sync.Mutex
	stdout, stderr bytes.Buffer
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// start starts setnxlock with args against s (SETNXLOCK_URL) in dir, its
// working directory.
func (s *server) start(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	return s.startVia(t, dir, nil, args...)
}

// startVia is start with setnxlock exec'd by a wrapper: the wrapper's argv,
// to which the binary and args are appended ("sh -c 'trap "" HUP; exec
// "$0" "$@"'" starts it with SIGHUP ignored, which Go's exec cannot do).
func (s *server) startVia(t *testing.T, dir string, wrapper []string, args ...string) *proc {
	t.Helper()
	argv := append(append(append([]string(nil), wrapper...), binary), args...)
	p := &proc{cmd: exec.Command(argv[0], argv[1:]...), exited: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), urlEnv+"="+s.url)
	p.cmd.Stdout = lockedWriter{&p.mu, &p.stdout}
	p.cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait() // bounded: the test waits on exited with a deadline, and its cleanup kills the process
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		await.Recv(t, p.exited, "setnxlock %v exiting after SIGKILL", args)
	})
	return p
}

// exit waits at most within for the process to exit and returns its
// status and how long it ran.
func (p *proc) exit(t *testing.T, within time.Duration) (int, time.Duration) {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		t.Fatalf("setnxlock %v did not exit within %v; stderr: %s", p.cmd.Args[1:], within, p.errors())
	}
	elapsed := time.Since(p.start)
	var exitErr *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exitErr) {
		t.Fatalf("setnxlock %v: %v", p.cmd.Args[1:], p.err)
	}
	if status, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && status.Signaled() {
		return 128 + int(status.Signal()), elapsed
	}
	return p.cmd.ProcessState.ExitCode(), elapsed
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String()
}

func (p *proc) errors() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// signal sends sig to the setnxlock process itself.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// result is a finished run.
type result struct {
	code    int
	stdout  string
	stderr  string
	elapsed time.Duration
}

// run runs setnxlock with args to the end, within 20s.
func (s *server) run(t *testing.T, args ...string) result {
	t.Helper()
	return s.runIn(t, t.TempDir(), args...)
}

func (s *server) runIn(t *testing.T, dir string, args ...string) result {
	t.Helper()
	p := s.start(t, dir, args...)
	code, elapsed := p.exit(t, await.Timeout)
	return result{code: code, stdout: p.output(), stderr: p.errors(), elapsed: elapsed}
}

// expect fails the test unless r exited with code.
func (r result) expect(t *testing.T, code int, what string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// eventually polls cond every 10ms until it holds, failing the test if it
// does not within d.
func eventually(t *testing.T, d time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", fmt.Sprintf(what, args...), d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitOutput waits until the process has printed text.
func (p *proc) waitOutput(t *testing.T, text string) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return strings.Contains(p.output(), text) },
		"setnxlock %v printing %q (stderr: %s)", p.cmd.Args[1:], text, p.errors())
}
