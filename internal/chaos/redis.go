package chaos

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// redisServer is the run's redis-server process. internal/redistest does
// the same for tests, but takes a testing.TB; the harness also runs as a
// program, and needs persistence.
type redisServer struct {
	bin, dir   string
	port       int
	persistent bool
	cmd        *exec.Cmd
	exit       chan struct{}
}

// redisBinary finds redis-server as internal/redistest does: $REDIS_SERVER_BIN,
// the PATH, /usr/bin.
func redisBinary() (string, error) {
	candidates := []string{os.Getenv("REDIS_SERVER_BIN")}
	if path, err := exec.LookPath("redis-server"); err == nil {
		candidates = append(candidates, path)
	}
	for _, c := range append(candidates, "/usr/bin/redis-server") {
		if info, err := os.Stat(c); c != "" && err == nil && !info.IsDir() {
			return c, nil
		}
	}
	return "", fmt.Errorf("chaos: redis-server not found (apt-get install redis-server, or set REDIS_SERVER_BIN)")
}

// startRedis starts a redis-server on a free loopback port, keeping its
// data in dir. With persistent it logs every write to an append-only file
// and fsyncs it before replying (appendonly yes, appendfsync always), so
// that a restart loses no acknowledged write: the README's assumption 4.
func startRedis(dir string, persistent bool) (*redisServer, error) {
	bin, err := redisBinary()
	if err != nil {
		return nil, err
	}
	s := &redisServer{bin: bin, dir: dir, persistent: persistent}
	for range 5 { // a free port can be taken by someone else before we bind it
		if s.port, err = freePort(); err != nil {
			continue
		}
		if err = s.launch(); err == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("chaos: cannot start redis-server: %w", err)
}

func (s *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// restart kills the server with SIGKILL, as a crash would, and starts it
// again on the same port and data directory. It returns when the server
// answers again, and the interval it was down.
func (s *redisServer) restart() (Interval, error) {
	down := Interval{From: time.Now()}
	s.kill()
	var err error
	for range 100 { // the port may linger briefly after the kill
		if err = s.launch(); err == nil {
			down.To = time.Now()
			return down, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return down, fmt.Errorf("chaos: cannot restart redis-server on %s: %w", s.addr(), err)
}

func (s *redisServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exit
	s.cmd = nil
}

func (s *redisServer) launch() error {
	appendonly := "no"
	if s.persistent {
		appendonly = "yes"
	}
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", appendonly,
		"--appendfsync", "always",
		"--maxmemory-policy", "noeviction",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	)
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exit:
			return fmt.Errorf("redis-server exited at start: %s", s.logTail())
		default:
		}
		if ping(s.addr()) == nil { // answers PONG only once the append-only file is loaded
			s.cmd, s.exit = cmd, exit
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exit
	return fmt.Errorf("redis-server did not answer PING on %s within 10s: %s", s.addr(), s.logTail())
}

func (s *redisServer) logTail() string {
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

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
