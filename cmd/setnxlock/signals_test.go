package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to setnxlock reach the
// command's process group; the command's own status is run's.
func TestSignalsAreForwardedToTheCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
		name := sig.String()
		script := `trap 'echo got; exit 42' ` + signalName(sig) + `; echo ready; while :; do sleep 0.05; done`
		p := s.start(t, t.TempDir(), "run", "k", "-c", script)
		p.waitOutput(t, "ready")
		p.signal(t, sig)
		code, _ := p.exit(t, 10*time.Second)
		if code != 42 || !strings.Contains(p.output(), "got") {
			t.Errorf("%s: exit %d, output %q; want the command's trap to run and exit 42; stderr: %s", name, code, p.output(), p.errors())
		}
	}
	if v := s.value(t, "k"); v != "<missing>" {
		t.Fatalf("the lock is left at %q", v)
	}
}

func signalName(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGINT: "INT", syscall.SIGHUP: "HUP", syscall.SIGQUIT: "QUIT"}[sig]
}

// A signal while setnxlock still waits ends the wait with 128+N and leaves
// nothing behind: no queue entry, no key of its own.
func TestASignalWhileWaitingLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.hold(t, "k", 30*time.Second)
	holderValue := s.value(t, "k")
	p := s.start(t, t.TempDir(), "run", "k", "--", "touch", "ran")
	eventually(t, 10*time.Second, func() bool { return s.raw.ZCard(context.Background(), "{k}.waiters").Val() == 1 },
		"the run queueing on the key")
	p.signal(t, syscall.SIGINT)
	if code, _ := p.exit(t, 10*time.Second); code != 128+int(syscall.SIGINT) {
		t.Fatalf("exit %d, want %d; stderr: %s", code, 128+int(syscall.SIGINT), p.errors())
	}
	if n := s.raw.ZCard(context.Background(), "{k}.waiters").Val(); n != 0 {
		t.Errorf("%d queue entries left behind", n)
	}
	if v := s.value(t, "k"); v != holderValue {
		t.Errorf("the key became %q", v)
	}
	keys := s.raw.Keys(context.Background(), "*").Val()
	if len(keys) != 1 || keys[0] != "k" {
		t.Errorf("keys left: %v, want only the holder's", keys)
	}
}
