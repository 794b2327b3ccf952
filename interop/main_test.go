package interop

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/redisproc"
)

// goHolderEnv, when set to "<redis addr> <key> <ttl>", turns the test
// binary into a Go holder process: it takes the lock in UnixMillis format,
// prints "acquired <value>", and holds it until it is killed. The crash
// test runs it so that a real OS process dies with SIGKILL mid-lease.
const goHolderEnv = "SETNXLOCK_INTEROP_GO_HOLDER"

// TestMain fails the package if a test leaves a goroutine behind, and runs
// the Go holder when asked to be one.
func TestMain(m *testing.M) {
	if spec := os.Getenv(goHolderEnv); spec != "" {
		runGoHolder(spec)
		return
	}
	goleak.VerifyTestMain(m)
}

func runGoHolder(spec string) {
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	f := strings.Fields(spec)
	if len(f) != 3 {
		fail(fmt.Errorf("%s=%q: want <addr> <key> <ttl>", goHolderEnv, spec))
	}
	ttl, err := time.ParseDuration(f[2])
	if err != nil {
		fail(err)
	}
	client := redis.NewClient(&redis.Options{Addr: f[0]})
	locker, err := setnxlock.New(client, setnxlock.WithTTL(ttl), setnxlock.WithFormat(setnxlock.UnixMillis))
	if err != nil {
		fail(err)
	}
	if _, err := locker.TryAcquire(context.Background(), f[1]); err != nil {
		fail(err)
	}
	value, err := client.Get(context.Background(), f[1]).Result()
	if err != nil {
		fail(err)
	}
	fmt.Println("acquired", value)
	select {} // bounded: the critical section, which ends only with the process the test kills
}

// startGoHolder runs the test binary as a Go holder of key and returns the
// process, once it holds the lock, and the value it wrote. The process is
// killed and waited for when the test ends, if it is still alive.
func startGoHolder(t *testing.T, addr, key string, ttl time.Duration) (*goHolder, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s", goHolderEnv, addr, key, ttl))
	cmd.Stderr = os.Stderr
	redisproc.DieWithParent(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &goHolder{cmd: cmd, exited: make(chan struct{})}
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		first <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, out) // until the process dies
		_ = cmd.Wait()                  // bounded: stdout is closed, so the process has ended
		close(h.exited)
	}()
	t.Cleanup(h.kill)
	var line string
	select {
	case line = <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the Go holder process did not report for 10s")
	}
	value, ok := strings.CutPrefix(line, "acquired ")
	if !ok {
		t.Fatalf("the Go holder process failed: %q", line)
	}
	return h, value
}

// goHolder is a Go holder in a process of its own.
type goHolder struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// kill sends SIGKILL, as a crash would, and waits for the process to end.
func (h *goHolder) kill() {
	_ = h.cmd.Process.Kill()
	<-h.exited // bounded: killed
}
