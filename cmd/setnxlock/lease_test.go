package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/faultproxy"
)

// A command that ignores SIGTERM, so that only the SIGKILL after the
// grace ends it; it says "ready" once running.
const stubborn = `trap "" TERM; echo ready; while :; do sleep 0.05; done`

// A lease lost while the command runs (the key overwritten behind its
// back) kills the command's process group within TTL + kill-grace, and
// run exits 75, leaving the new value alone.
func TestALostLeaseKillsTheCommandAndExits75(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	p := s.start(t, t.TempDir(), "run", "--ttl", "1s", "--kill-grace", "500ms", "k", "-c", stubborn)
	p.waitOutput(t, "ready")
	intruder := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	if err := s.raw.Set(context.Background(), "k", intruder, 0).Err(); err != nil {
		t.Fatal(err)
	}
	overwritten := time.Now()
	code, _ := p.exit(t, 10*time.Second)
	if code != exitLost {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitLost, p.errors())
	}
	if took := time.Since(overwritten); took > time.Second+500*time.Millisecond+time.Second {
		t.Errorf("the command was killed %v after the loss, beyond TTL + kill-grace (+1s of slack)", took)
	}
	if v := s.value(t, "k"); v != intruder {
		t.Errorf("the new holder's value became %q", v)
	}
	if !strings.Contains(p.errors(), "lease lost") {
		t.Errorf("stderr does not say the lease was lost: %s", p.errors())
	}
}

// A SIGKILLed setnxlock takes its command with it (Linux), and its lock
// ends with its lease: the next run gets it after that, not before.
func TestASIGKILLedRunIsRecoveredByTheNextAfterItsLease(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dir := t.TempDir()
	p := s.start(t, dir, "run", "--ttl", "1s", "k", "-c", `echo $$ > pid; echo ready; while :; do sleep 0.05; done`)
	p.waitOutput(t, "ready")
	p.signal(t, syscall.SIGKILL)
	killed := time.Now()
	p.exit(t, 10*time.Second)
	s.run(t, "run", "-n", "k", "--", "true").expect(t, 1, "a run while the dead run's lease lasts")

	pid, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool { return !running(strings.TrimSpace(string(pid))) },
		"the command of the SIGKILLed run dying with it")

	s.run(t, "run", "-w", "10", "k", "--", "true").expect(t, 0, "the next run")
	if took := time.Since(killed); took < 500*time.Millisecond {
		t.Errorf("the next run got the lock %v after the kill, well inside a 1s lease", took)
	}
}

// running reports whether the process pid is alive (not gone, not a zombie).
func running(pid string) bool {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// Redis unreachable at the first attempt: 69 at once, for every command.
func TestAnUnreachableServerExits69(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	down := "redis://127.0.0.1:1/0" // port 1: nothing listens, the dial is refused
	r := s.run(t, "run", "--url", down, "k", "--", "true").expect(t, exitUnavailable, "run")
	if r.elapsed > 5*time.Second {
		t.Errorf("run waited %v on a server that is down", r.elapsed)
	}
	s.run(t, "run", "-w", "5", "--url", down, "k", "--", "true").expect(t, exitUnavailable, "run -w")
	s.run(t, "status", "--url", down, "k").expect(t, exitUnavailable, "status")
	s.run(t, "release", "--force", "--url", down, "k").expect(t, exitUnavailable, "release --force")
}

// A holder cut off from Redis (its connections frozen, not closed: only
// its own clock tells it anything) has its command dead by the end of its
// lease (H11), while a second run reaching Redis takes the key over after
// that end. Both commands log to one file with their clock's stamps: the
// first a heartbeat every 10ms, and the SIGTERM it gets (its trap logs it
// and goes on: only SIGKILL ends it); the second a line as it starts.
// Every line of the first comes before the end of its lease as Redis
// stored it when the partition began, hence before the second's start.
func TestACutOffHoldersCommandIsDeadBeforeTheNextStarts(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	proxy := faultproxy.Start(t, s.addr)
	dir := t.TempDir()
	a := s.start(t, dir, "run", "--url", "redis://"+proxy.Addr()+"/0", "--ttl", "1s", "k", "-c",
		`trap 'echo "term $(date +%s%N)" >> log' TERM; while :; do echo "a $(date +%s%N)" >> log; sleep 0.01; done`)
	eventually(t, 10*time.Second, func() bool {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return len(log) > 0
	}, "the first run's command starting")
	proxy.Freeze()
	status, err := s.locker(t).Status(await.Context(t), "k")
	if err != nil || !status.Held {
		t.Fatalf("the first run's lease as the partition begins: %+v, %v", status, err)
	}
	leaseEnd := status.ExpiresAt.UnixNano() // no later than the end the first run believes
	b := s.start(t, dir, "run", "-w", "15", "--ttl", "1s", "k", "-c", `echo "b $(date +%s%N)" >> log`)
	if code, _ := b.exit(t, await.Timeout); code != 0 {
		t.Fatalf("the second run: exit %d; stderr: %s", code, b.errors())
	}
	if code, _ := a.exit(t, await.Timeout); code != exitLost {
		t.Fatalf("the cut-off run: exit %d, want %d; stderr: %s", code, exitLost, a.errors())
	}
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	var bStart, aLast, term int64
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		who, stamp, _ := strings.Cut(line, " ")
		ns, err := strconv.ParseInt(stamp, 10, 64)
		switch {
		case stamp == "" && who == "a" && bStart == 0:
			continue // its date was killed by the group's SIGTERM: a heartbeat without a stamp, before the second's start
		case err != nil:
			t.Fatalf("log line %q", line)
		case who == "b":
			bStart = ns
		case bStart != 0:
			t.Fatalf("the cut-off run's command logged %q %v after the second command started: two holders at once\n%s",
				line, time.Duration(ns-bStart), log)
		case ns >= leaseEnd:
			t.Fatalf("the cut-off run's command logged %q %v after its lease ended\n%s", line, time.Duration(ns-leaseEnd), log)
		case who == "term":
			term = ns
		default:
			aLast = ns
		}
	}
	if bStart == 0 || term == 0 {
		t.Fatalf("no line from the second command, or no SIGTERM logged by the first:\n%s", log)
	}
	t.Logf("the cut-off command got SIGTERM %v and logged last %v before its lease's end, %v before the second command started",
		time.Duration(leaseEnd-term), time.Duration(leaseEnd-aLast), time.Duration(bStart-aLast))
}
