package main

import (
	"context"
	"os"
	"strconv"
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

// A SIGHUP or SIGINT ignored when setnxlock started (nohup, trap ” HUP,
// a script's background job) stays ignored: it is not forwarded, and the
// command survives it. The SIGTERM sent after it is forwarded, and the
// command's trap exits 0: had the ignored signal been forwarded, it would
// have reached the command first and killed it (128+N), since it has left
// setnxlock's pending set before the SIGTERM is sent.
func TestASignalIgnoredAtTheStartStaysIgnored(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		wrapper := []string{"sh", "-c", `trap "" ` + signalName(sig) + `; exec "$0" "$@"`} // Go's exec cannot start a process with a signal ignored
		p := s.startVia(t, t.TempDir(), wrapper, "run", "k", "-c", `trap 'echo survived; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
		p.waitOutput(t, "ready")
		p.signal(t, sig)
		eventually(t, 10*time.Second, func() bool { return !p.pending(t, sig) }, "%v leaving setnxlock's pending signals", sig)
		p.signal(t, syscall.SIGTERM)
		if code, _ := p.exit(t, 10*time.Second); code != 0 || !strings.Contains(p.output(), "survived") {
			t.Errorf("%v ignored at the start: exit %d, output %q; want the command to survive it and exit 0 by its SIGTERM trap; stderr: %s",
				sig, code, p.output(), p.errors())
		}
	}
	if v := s.value(t, "k"); v != "<missing>" {
		t.Fatalf("the lock is left at %q", v)
	}
}

// pending reports whether sig is pending for the process as a whole: sent,
// and not yet taken by one of its threads (ShdPnd in /proc/PID/status).
func (p *proc) pending(t *testing.T, sig syscall.Signal) bool {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if mask, ok := strings.CutPrefix(line, "ShdPnd:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			if err != nil {
				t.Fatalf("ShdPnd %q: %v", mask, err)
			}
			return bits&(1<<(sig-1)) != 0
		}
	}
	t.Fatalf("no ShdPnd in /proc/%d/status", p.cmd.Process.Pid)
	return false
}
