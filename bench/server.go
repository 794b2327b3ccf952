package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverBinEnv names an environment variable that overrides where the
// redis-server binary is found (the same one the library's tests read).
const serverBinEnv = "REDIS_SERVER_BIN"

// errNoServer means no redis-server binary was found.
var errNoServer = errors.New("redis-server not found (apt-get install redis-server, or set " + serverBinEnv + ")")

// findServer returns the path of redis-server: $REDIS_SERVER_BIN, the PATH,
// then /usr/bin/redis-server.
func findServer() (string, error) {
	candidates := []string{os.Getenv(serverBinEnv)}
	if path, err := exec.LookPath("redis-server"); err == nil {
		candidates = append(candidates, path)
	}
	candidates = append(candidates, "/usr/bin/redis-server")
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if info, err := os.Stat(c); err == nil && !info.IsDir() {
			return c, nil
		}
	}
	return "", errNoServer
}

// server is the one redis-server process a run measures against.
type server struct {
	addr string
	cmd  *exec.Cmd
	dir  string
	exit chan struct{}
}

// startServer launches redis-server with persistence off on a free loopback
// port and waits until it answers PING.
func startServer(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "setnxlock-bench-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 { // the free port can be taken before redis-server binds it
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, exit: make(chan struct{})}
		s.cmd = exec.Command(bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--daemonize", "no", "--loglevel", "warning", "--logfile", "")
		s.cmd.Stdout, s.cmd.Stderr = nil, nil
		if err := s.cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("start %s: %w", bin, err)
		}
		go func() { _ = s.cmd.Wait(); close(s.exit) }()
		if lastErr = s.waitReady(5 * time.Second); lastErr == nil {
			return s, nil
		}
		s.kill()
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redis-server did not come up: %w", lastErr)
}

// waitReady polls the server with PING until it answers or d passes.
func (s *server) waitReady(d time.Duration) error {
	client := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer func() { _ = client.Close() }()
	deadline := time.Now().Add(d)
	for {
		select {
		case <-s.exit:
			return errors.New("redis-server exited")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the server process and removes its directory.
func (s *server) stop() {
	s.kill()
	_ = os.RemoveAll(s.dir)
}

// kill ends the server process and waits for it.
func (s *server) kill() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// serverVersion returns the server's redis_version from INFO server.
func serverVersion(ctx context.Context, client *redis.Client) string {
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}
