// Package redisproc starts redis-server processes on free loopback ports,
// and kills, pauses and restarts them; StartSentinel starts a Redis
// Sentinel deployment of them for failover tests. It is the one launcher
// behind the tests (internal/redistest), the chaos harness and the
// benchmarks, so it takes no testing.TB.
//
// Every process it starts dies with the process that started it, even when
// that one is killed by go test's timeout or a signal (DieWithParent): no
// run leaves servers behind.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// BinaryEnv names an environment variable that overrides where the
// redis-server binary is found.
const BinaryEnv = "REDIS_SERVER_BIN"

// ErrNoBinary means no redis-server binary was found.
var ErrNoBinary = errors.New("redis-server not found (install it, e.g. apt-get install redis-server, or set " + BinaryEnv + ")")

// Binary returns the path of redis-server: $REDIS_SERVER_BIN, the PATH,
// then /usr/bin/redis-server.
func Binary() (string, error) {
	candidates := []string{os.Getenv(BinaryEnv)}
	if path, err := exec.LookPath("redis-server"); err == nil {
		candidates = append(candidates, path)
	}
	for _, c := range append(candidates, "/usr/bin/redis-server") {
		if c == "" {
			continue
		}
		if info, err := os.Stat(c); err == nil && !info.IsDir() {
			return c, nil
		}
	}
	return "", ErrNoBinary
}

// Config describes a server to start.
type Config struct {
	Bin  string   // the redis-server binary (see Binary)
	Dir  string   // its working directory: log, append-only file, nodes.conf
	Args []string // extra arguments after the port, bind address, dir and log file
	// ConfigFile, when set, is passed as the first argument, where
	// redis-server looks for a config file. Sentinel needs one it can
	// rewrite; options on the command line override the file's.
	ConfigFile string
	// ClusterBus asks for a port whose cluster bus port (+10000) is free too.
	ClusterBus bool
	// Ready bounds how long a start waits for PING to be answered
	// (default 10s): with persistence on, a server answers only once its
	// append-only file is loaded.
	Ready time.Duration
}

// Server is one redis-server process. Its methods are safe for concurrent
// use.
type Server struct {
	cfg  Config
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for
}

// Start launches a server on a free loopback port and returns once it
// answers PING. Persistence is off unless cfg.Args turn it on.
func Start(cfg Config) (*Server, error) {
	if cfg.Ready <= 0 {
		cfg.Ready = 10 * time.Second
	}
	s := &Server{cfg: cfg}
	var err error
	for range 10 { // a free port can be taken by someone else before we bind it
		if s.port, err = freePort(cfg.ClusterBus); err != nil {
			continue
		}
		if err = s.launch(); err == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redisproc: cannot start redis-server: %w", err)
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Running reports whether the process is alive (paused counts): started,
// not killed since, and not exited on its own.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exit:
		return false
	default:
		return true
	}
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it to
// exit. Killing a server that is not running does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies only once continued
	_ = s.cmd.Process.Kill()
	<-s.exit
	s.cmd = nil
}

// Restart kills the server if it runs and starts it again on the same port
// and directory, retrying while the port lingers after the kill.
func (s *Server) Restart() error {
	s.Kill()
	var err error
	for range 100 {
		if err = s.launch(); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redisproc: cannot restart redis-server on %s: %w", s.Addr(), err)
}

// Pause stops the process with SIGSTOP: connections stay open but nothing
// is answered until Resume.
func (s *Server) Pause() error { return s.Signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.Signal(syscall.SIGCONT) }

// Signal sends sig to the server process.
func (s *Server) Signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("redisproc: server on %s is not running", s.Addr())
	}
	return s.cmd.Process.Signal(sig)
}

// LogTail returns the last lines of the server's log, for error messages.
func (s *Server) LogTail() string {
	data, _ := os.ReadFile(filepath.Join(s.cfg.Dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], " | ")
}

// launch starts the process and waits for PING to be answered.
func (s *Server) launch() error {
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.cfg.Dir,
		"--logfile", filepath.Join(s.cfg.Dir, "redis.log"),
	}, s.cfg.Args...)
	if s.cfg.ConfigFile != "" {
		args = append([]string{s.cfg.ConfigFile}, args...)
	}
	cmd := exec.Command(s.cfg.Bin, args...)
	DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	deadline := time.Now().Add(s.cfg.Ready)
	for time.Now().Before(deadline) {
		select {
		case <-exit:
			return fmt.Errorf("redis-server exited at start: %s", s.LogTail())
		default:
		}
		if Ping(s.Addr()) == nil {
			s.mu.Lock()
			s.cmd, s.exit = cmd, exit
			s.mu.Unlock()
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exit
	return fmt.Errorf("redis-server did not answer PING on %s within %v: %s", s.Addr(), s.cfg.Ready, s.LogTail())
}

// Ping reports whether the server (or sentinel) at addr is serving: it
// answers PING with PONG within 500ms, which one still loading its data
// does not (LOADING).
func Ping(addr string) error {
	pong, err := call(redis.NewClient, addr, time.Now().Add(500*time.Millisecond), func(ctx context.Context, c *redis.Client) (string, error) {
		return c.Ping(ctx).Result()
	})
	if err == nil && pong != "PONG" {
		err = fmt.Errorf("unexpected reply %q", pong)
	}
	return err
}

// freePort asks the kernel for a loopback port that is free right now;
// with clusterBus, one whose cluster bus port (+10000) is free too.
func freePort(clusterBus bool) (int, error) {
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !clusterBus {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, errors.New("no free port with a free cluster bus port")
}
