package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/setnxlock/setnxlock/internal/await"
)

// leaveBehind is a shell command that leaves a process behind in its
// group, its output closed, which runs prefix, then until the test creates
// the file "go" (or 30s pass), then writes "finished". The command records
// its own pid in "leader" and the other's in "descendant", prints "done"
// and exits 0.
func leaveBehind(prefix string) string {
	return `echo $$ > leader; (` + prefix + `i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo > finished) >/dev/null 2>&1 & echo $! > descendant; echo done`
}

// pidIn reads the pid a command wrote to dir/name, and kills that process
// when the test ends, whatever happened.
func pidIn(t *testing.T, dir, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(raw))
	n, err := strconv.Atoi(pid)
	if err != nil {
		t.Fatalf("%s holds %q", name, raw)
	}
	t.Cleanup(func() { _ = syscall.Kill(n, syscall.SIGKILL) })
	return pid
}

// By default the lock is held, and renewed, after the command exits, for
// as long as a process it left in its group runs (as flock(1)'s is while
// they keep its descriptor); it is released once they have exited, also
// when the exited ones stay zombies (kill(-group, 0) counts them) because
// their new parent does not reap them.
func TestTheLockIsHeldUntilTheCommandsGroupHasExited(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		wrapper []string
	}{{"orphans reaped by init", nil}, {"orphans left zombies", underSubreaper}} {
		s := startServer(t)
		dir := t.TempDir()
		p := s.startVia(t, dir, c.wrapper, "run", "-v", "--ttl", "1s", "k", "-c", leaveBehind("")) // -v: its stderr says what it did
		p.waitOutput(t, "done")
		leader, descendant := pidIn(t, dir, "leader"), pidIn(t, dir, "descendant")
		eventually(t, 10*time.Second, func() bool { return !running(leader) }, "%s: the command's leader exiting", c.name)

		held := s.value(t, "k")
		if r := s.run(t, "run", "-n", "k", "--", "true"); r.code != exitConflict {
			t.Fatalf("%s: a run while the command's background process runs: exit %d, want %d; the holder's stderr: %s",
				c.name, r.code, exitConflict, p.errors())
		}
		eventually(t, 10*time.Second, func() bool { return s.value(t, "k") != held },
			"%s: a renewal after the leader's exit (the value still %q)", c.name, held)
		s.run(t, "run", "-n", "k", "--", "true").expect(t, exitConflict, c.name+": a run after a renewal, while the background process runs")
		select {
		case <-p.exited:
			t.Fatalf("%s: setnxlock exited while a process of its command's group ran; stderr: %s", c.name, p.errors())
		default:
		}

		if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if code, _ := p.exit(t, await.Timeout); code != 0 {
			t.Fatalf("%s: exit %d, want the command's 0; stderr: %s", c.name, code, p.errors())
		}
		if running(descendant) {
			t.Fatalf("%s: setnxlock exited while the background process still ran", c.name)
		}
		if v := s.value(t, "k"); v != "<missing>" {
			t.Fatalf("%s: the lock is left at %q", c.name, v)
		}
	}
}

// With --kill-descendants, what the command leaves in its group is killed
// at its exit (SIGTERM, then SIGKILL after the grace for one that ignores
// SIGTERM) and the lock released then, without waiting for it to end;
// run's status is the command's.
func TestKillDescendantsKillsWhatTheCommandLeftBehind(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dir := t.TempDir()
	p := s.start(t, dir, "run", "--kill-descendants", "--kill-grace", "200ms", "k", "-c", leaveBehind(`trap "" TERM; `))
	if code, _ := p.exit(t, await.Timeout); code != 0 {
		t.Fatalf("exit %d, want the command's 0; stderr: %s", code, p.errors())
	}
	if running(pidIn(t, dir, "descendant")) {
		t.Fatal("the background process runs on after setnxlock exited")
	}
	if _, err := os.Stat(filepath.Join(dir, "finished")); err == nil {
		t.Fatal("the background process ended by itself: setnxlock waited for it instead of killing it")
	}
	if v := s.value(t, "k"); v != "<missing>" {
		t.Fatalf("the lock is left at %q", v)
	}
}
