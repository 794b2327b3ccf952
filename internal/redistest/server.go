// Package redistest starts real redis-server processes on free loopback
// ports for tests, and can kill, pause and restart them to inject faults.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BinaryEnv names an environment variable that overrides where the
// redis-server binary is found.
const BinaryEnv = "REDIS_SERVER_BIN"

// Server is one redis-server process owned by a test. It is stopped when the
// test ends.
type Server struct {
	tb   testing.TB
	bin  string
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for
}

// Binary returns the path of redis-server. When it cannot be found the test
// is skipped, or fails when the CI environment variable is "true", because
// CI must never pass by skipping the real-server tests.
func Binary(tb testing.TB) string {
	tb.Helper()
	candidates := []string{os.Getenv(BinaryEnv)}
	if path, err := exec.LookPath("redis-server"); err == nil {
		candidates = append(candidates, path)
	}
	candidates = append(candidates, "/usr/bin/redis-server")
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if info, err := os.Stat(c); err == nil && !info.IsDir() {
			return c
		}
	}
	msg := "redis-server not found (install it, e.g. apt-get install redis-server, or set " + BinaryEnv + ")"
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
	return ""
}

// Start launches a redis-server with persistence off on a free loopback
// port and waits until it answers. Extra arguments are passed to the server
// (for example "--requirepass", "secret").
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s := &Server{tb: tb, bin: Binary(tb), dir: tb.TempDir(), args: args}
	var lastErr error
	for range 5 { // a free port can be taken by someone else before we bind it
		s.port, lastErr = freePort()
		if lastErr != nil {
			continue
		}
		if lastErr = s.launch(); lastErr == nil {
			tb.Cleanup(s.stop)
			return s
		}
	}
	tb.Fatalf("redistest: cannot start redis-server: %v", lastErr)
	return nil
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Kill ends the server with SIGKILL, as a crash would; with persistence off
// every key is lost.
func (s *Server) Kill() {
	s.tb.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exit
	s.cmd = nil
}

// Restart kills the server if it runs and starts it again on the same port.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	var err error
	for range 50 { // the port may linger briefly after the kill
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.tb.Fatalf("redistest: cannot restart redis-server on %s: %v", s.Addr(), err)
}

// Pause stops the server process with SIGSTOP: connections stay open but
// nothing is answered until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.tb.Helper()
	if s.cmd == nil {
		s.tb.Fatalf("redistest: server on %s is not running", s.Addr())
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: signal %v: %v", sig, err)
	}
}

func (s *Server) stop() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot die cleanly otherwise
	}
	s.Kill()
}

// launch starts the process and waits for PING to be answered.
func (s *Server) launch() error {
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exit:
			return fmt.Errorf("redis-server exited at start: %s", s.logTail())
		default:
		}
		if ping(s.Addr()) == nil {
			s.cmd, s.exit = cmd, exit
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exit
	return fmt.Errorf("redis-server did not answer PING on %s within 5s: %s", s.Addr(), s.logTail())
}

func (s *Server) logTail() string {
	data, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], " | ")
}

// ping speaks just enough RESP to learn whether the server is serving.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	return nil
}

// freePort asks the kernel for a loopback port that is free right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
