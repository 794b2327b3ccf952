package redisproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// parentEnv turns the test binary into a parent that starts a server,
// prints its address and then waits to be killed.
const parentEnv = "REDISPROC_TEST_PARENT"

func TestMain(m *testing.M) {
	if dir := os.Getenv(parentEnv); dir != "" {
		bin, err := Binary()
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		s, err := Start(Config{Bin: bin, Dir: dir})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("serving", s.Addr())
		time.Sleep(time.Minute) // killed long before
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

func binary(t *testing.T) string {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return bin
}

// A server outlives nothing: when the process that started it is killed
// (as go test's timeout or a CI runner would), the kernel kills the server.
func TestAServerDiesWithTheProcessThatStartedIt(t *testing.T) {
	binary(t)
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(self, "-test.run=^$")
	parent.Env = append(os.Environ(), parentEnv+"="+t.TempDir())
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = parent.Process.Kill(); _ = parent.Wait() }() // bounded: killed

	line := make(chan string, 1)
	go func() { l, _ := bufio.NewReader(out).ReadString('\n'); line <- strings.TrimSpace(l) }()
	var addr string
	select {
	case l := <-line:
		var ok bool
		if addr, ok = strings.CutPrefix(l, "serving "); !ok {
			t.Fatalf("the parent did not start a server: %q", l)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the parent did not report its server within 15s")
	}
	if err := Ping(addr); err != nil {
		t.Fatalf("the server on %s does not answer: %v", addr, err)
	}

	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for Ping(addr) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the server on %s still answers 5s after its parent was killed", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAServerCanBeKilledPausedAndRestarted(t *testing.T) {
	s, err := Start(Config{Bin: binary(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if Ping(s.Addr()) == nil {
		t.Fatal("a paused server answered PING")
	}
	s.Kill() // a paused server dies too
	if Ping(s.Addr()) == nil {
		t.Fatal("a killed server answered PING")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := Ping(s.Addr()); err != nil {
		t.Fatalf("the restarted server does not answer: %v", err)
	}
}
