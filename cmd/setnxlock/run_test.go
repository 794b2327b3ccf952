package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/setnxlock/setnxlock/internal/await"
)

// Bad usage exits 64 with a message on stderr, and sends nothing to Redis.
func TestBadUsageExits64AndWritesNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"run"},
		{"run", "k"},
		{"run", "k", "-c", "true", "extra"},
		{"run", "-s", "k", "true"},
		{"run", "-u", "k"},
		{"run", "k", "-c", "true", "--", "true"},
		{"run", "k", "-c", ""},
		{"run", "", "--", "true"},
		{"run", "--format", "hex", "k", "--", "true"},
		{"run", "-n", "-w", "2", "k", "--", "true"},
		{"run", "-w", "-1", "k", "--", "true"},
		{"run", "-w", "soon", "k", "--", "true"},
		{"run", "-E", "300", "k", "--", "true"},
		{"run", "--ttl", "1ms", "k", "--", "true"},
		{"run", "--min-hold", "-1s", "k", "--", "true"},
		{"run", "--bogus", "k", "--", "true"},
		{"run", "--url", "http://example.com", "k", "--", "true"},
		{"run", "--url", "redis+sentinel://127.0.0.1:26379/0", "k", "--", "true"},
		{"status"},
		{"status", "k", "k"},
		{"status", "k", ""},
		{"status", "--rw", "k", "j"},
		{"status", "--rw", "--match", "x*"},
		{"release", "k"},
		{"release", "--force"},
	} {
		r := s.run(t, args...)
		r.expect(t, exitUsage, strings.Join(args, " "))
		if !strings.Contains(r.stderr, "setnxlock") || r.stdout != "" {
			t.Errorf("%q: want a message on stderr only; stdout %q, stderr %q", args, r.stdout, r.stderr)
		}
	}
	if keys := s.raw.Keys(context.Background(), "*").Val(); len(keys) != 0 {
		t.Fatalf("bad usage wrote to Redis: %v", keys)
	}
}

// --help, run --help and version print to stdout and exit 0.
func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"status", "-h"}, {"release", "--help"}, {"version"}, {"-V"}, {"run", "-V"}} {
		r := s.run(t, args...).expect(t, exitOK, strings.Join(args, " "))
		if r.stdout == "" {
			t.Errorf("%q printed nothing", args)
		}
	}
	if r := s.run(t, "run", "--help"); !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "--min-hold") {
		t.Errorf("run --help lacks examples or flags:\n%s", r.stdout)
	}
}

// The command's own status is run's: plain, and 128+N by signal N; the
// lock is released after it, and flags may come after KEY.
func TestRunPassesTheCommandsExitStatusThrough(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.run(t, "run", "k", "--", "true").expect(t, 0, "true")
	s.run(t, "run", "k", "--", "sh", "-c", "exit 7").expect(t, 7, "exit 7")
	s.run(t, "run", "k", "-c", "exit 3").expect(t, 3, "-c 'exit 3' after KEY")
	s.run(t, "run", "k", "-c", "kill -TERM $$").expect(t, 128+15, "a command killed by SIGTERM")
	s.run(t, "run", "-c", "kill -KILL $$", "k").expect(t, 128+9, "a command killed by SIGKILL, -c before KEY")
	s.run(t, "run", "k", "--", "./no-such-command").expect(t, exitNotFound, "a command that does not exist")
	if v := s.value(t, "k"); v != "<missing>" {
		t.Fatalf("the lock is left at %q after the runs", v)
	}
}

// -n and -w give up on a held lock with the conflict code, 1 or -E's.
func TestAHeldLockGivesTheConflictCode(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.hold(t, "k", 30*time.Second)
	s.run(t, "run", "-n", "k", "--", "true").expect(t, 1, "-n")
	s.run(t, "run", "k", "--nonblock", "-E", "9", "--", "true").expect(t, 9, "--nonblock -E 9")
	s.run(t, "run", "-w", "0", "k", "--", "true").expect(t, 1, "-w 0, as -n")
	r := s.run(t, "run", "-w", "0.4", "--conflict-exit-code", "0", "k", "--", "touch", "ran").expect(t, 0, "-w 0.4 -E 0")
	if r.elapsed < 400*time.Millisecond {
		t.Errorf("-w 0.4 gave up after %v", r.elapsed)
	}
	s.run(t, "run", "--wait", "300ms", "k", "--", "true").expect(t, 1, "--wait 300ms")
}

// A run waits while the lock is held and runs its command once it is
// released.
func TestARunWaitsThenRuns(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	held := s.hold(t, "k", 30*time.Second)
	dir := t.TempDir()
	p := s.start(t, dir, "run", "-w", "15", "k", "--", "sh", "-c", "echo ran > out")
	eventually(t, 10*time.Second, func() bool { return s.raw.ZCard(context.Background(), "{k}.waiters").Val() == 1 },
		"the run queueing on the key")
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Fatal("the command ran while the lock was held")
	}
	if err := held.Release(await.Context(t)); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.exit(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, p.errors())
	}
	if out, _ := os.ReadFile(filepath.Join(dir, "out")); string(out) != "ran\n" {
		t.Fatalf("the command wrote %q", out)
	}
}

// A run handed the lock by a release holds it first on the release's
// provisional value, for 250ms at most, until its claim is confirmed (the
// library's heard.go); its command starts only once the lease is the
// run's own, of its whole TTL, which the command reads in its environment.
func TestARunHandedTheLockStartsItsCommandOnALeaseOfItsOwn(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	held := s.hold(t, "k", 30*time.Second)
	dir := t.TempDir()
	p := s.start(t, dir, "run", "-w", "15", "--ttl", "20s", "k", "--", "sh", "-c", `echo "$SETNXLOCK_EXPIRES_AT" > out`)
	eventually(t, 10*time.Second, func() bool { return s.raw.ZCard(context.Background(), "{k}.waiters").Val() == 1 },
		"the run queueing on the key")
	time.Sleep(5 * time.Millisecond) // past the starvation threshold: the release hands the key over
	before := time.Now()
	if err := held.Release(await.Context(t)); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.exit(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, p.errors())
	}
	out, _ := os.ReadFile(filepath.Join(dir, "out"))
	expires, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("SETNXLOCK_EXPIRES_AT %q: %v", out, err)
	}
	if expires.Before(before.Add(19 * time.Second)) {
		t.Errorf("SETNXLOCK_EXPIRES_AT %v is not the run's own lease of 20s after the handoff at %v", expires, before)
	}
}

// The command gets the key, the lease's end in RFC 3339 and, with
// --fencing, the token.
func TestTheCommandGetsTheLockInItsEnvironment(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	before := time.Now()
	r := s.run(t, "run", "--fencing", "--ttl", "20s", "lock.env", "--", "sh", "-c",
		`echo "$SETNXLOCK_KEY|$SETNXLOCK_EXPIRES_AT|$SETNXLOCK_FENCING_TOKEN"`).expect(t, 0, "env")
	fields := strings.Split(strings.TrimSpace(r.stdout), "|")
	if len(fields) != 3 || fields[0] != "lock.env" {
		t.Fatalf("environment %q", r.stdout)
	}
	expires, err := time.Parse(time.RFC3339, fields[1])
	if err != nil {
		t.Fatalf("SETNXLOCK_EXPIRES_AT %q: %v", fields[1], err)
	}
	if expires.Before(before.Add(19*time.Second)) || expires.After(time.Now().Add(21*time.Second)) {
		t.Errorf("SETNXLOCK_EXPIRES_AT %v is not 20s after the start %v", expires, before)
	}
	if token, err := strconv.ParseInt(fields[2], 10, 64); err != nil || token < 1 {
		t.Errorf("SETNXLOCK_FENCING_TOKEN %q", fields[2])
	}
	r = s.run(t, "run", "--fencing", "lock.env", "--", "sh", "-c", `echo "$SETNXLOCK_FENCING_TOKEN"`).expect(t, 0, "env")
	if next, _ := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64); strconv.FormatInt(next-1, 10) != fields[2] {
		t.Errorf("the next holder's token is %q after %q", strings.TrimSpace(r.stdout), fields[2])
	}
	r = s.run(t, "run", "lock.env", "--", "sh", "-c", `echo "${SETNXLOCK_FENCING_TOKEN-unset}"`).expect(t, 0, "env")
	if strings.TrimSpace(r.stdout) != "unset" {
		t.Errorf("without --fencing the token is %q", r.stdout)
	}
}

// --min-hold leaves a lease that ends that long after the acquisition:
// setnxlock exits with its command, and the next run gets the lock only
// after that instant.
func TestMinHoldLeavesALeaseEndingThen(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	start := time.Now()
	r := s.run(t, "run", "-n", "--min-hold", "2s", "nightly", "--", "true").expect(t, 0, "--min-hold 2s")
	if r.elapsed > 1500*time.Millisecond {
		t.Errorf("setnxlock stayed %v: it should leave the lease and exit", r.elapsed)
	}
	s.run(t, "run", "-n", "nightly", "--", "true").expect(t, 1, "a run inside the min-hold")
	s.run(t, "status", "nightly").expect(t, exitOK, "status inside the min-hold")
	eventually(t, 10*time.Second, func() bool {
		return s.run(t, "run", "-n", "nightly", "--", "true").code == 0
	}, "a run after the min-hold getting the lock")
	if held := time.Since(start); held < 2*time.Second {
		t.Fatalf("the next run got the lock %v after the first started, inside the min-hold", held)
	}
}

// --max-runtime kills the command (SIGTERM, then SIGKILL after the grace)
// and exits 124; the lock is released.
func TestMaxRuntimeKillsTheCommandAndExits124(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.run(t, "run", "--max-runtime", "300ms", "--kill-grace", "300ms", "k", "-c",
		`trap "" TERM; while :; do sleep 0.05; done`).expect(t, exitMaxRuntime, "--max-runtime")
	if r.elapsed < 300*time.Millisecond || r.elapsed > 5*time.Second {
		t.Errorf("--max-runtime 300ms with a 300ms grace ended after %v", r.elapsed)
	}
	if v := s.value(t, "k"); v != "<missing>" {
		t.Fatalf("the lock is left at %q", v)
	}
	s.run(t, "run", "--max-runtime", "10s", "k", "--", "sh", "-c", "exit 5").expect(t, 5, "a command within its --max-runtime")
}
