package main

import (
	"context"
	"os"

	"github.com/redis/go-redis/v9"
	"github.com/setnxlock/setnxlock/internal/redisproc"
)

// errNoServer means no redis-server binary was found.
var errNoServer = redisproc.ErrNoBinary

// findServer returns the path of redis-server, as every launcher of the
// project finds it: $REDIS_SERVER_BIN, the PATH, then /usr/bin.
func findServer() (string, error) { return redisproc.Binary() }

// server is the one redis-server process a run measures against.
type server struct {
	addr string
	proc *redisproc.Server
	dir  string
}

// startServer launches redis-server with persistence off on a free loopback
// port and waits until it answers PING.
func startServer(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "setnxlock-bench-")
	if err != nil {
		return nil, err
	}
	proc, err := redisproc.Start(redisproc.Config{Bin: bin, Dir: dir, Args: []string{"--loglevel", "warning"}})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &server{addr: proc.Addr(), proc: proc, dir: dir}, nil
}

// stop ends the server process and removes its directory.
func (s *server) stop() {
	s.proc.Kill()
	_ = os.RemoveAll(s.dir)
}

// serverVersion returns the server's redis_version from INFO server.
func serverVersion(ctx context.Context, client *redis.Client) string {
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	if v, ok := infoField(info, "redis_version"); ok {
		return v
	}
	return "unknown"
}
