// Package redistest starts real redis-server processes on free loopback
// ports for tests (single servers, a Cluster, a Sentinel deployment), and
// can kill, pause and restart them to inject faults.
// The processes themselves are internal/redisproc's; this package ties
// them to a test: skipped or failed when the binary is missing, stopped
// when the test ends.
package redistest

import (
	"os"
	"testing"

	"github.com/setnxlock/setnxlock/internal/redisproc"
)

// BinaryEnv names an environment variable that overrides where the
// redis-server binary is found.
const BinaryEnv = redisproc.BinaryEnv

// Server is one redis-server process owned by a test. It is stopped when the
// test ends.
type Server struct {
	tb testing.TB
	*redisproc.Server
}

// Binary returns the path of redis-server. When it cannot be found the test
// is skipped, or fails when the CI environment variable is "true", because
// CI must never pass by skipping the real-server tests.
func Binary(tb testing.TB) string {
	tb.Helper()
	bin, err := redisproc.Binary()
	if err == nil {
		return bin
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal(err)
	}
	tb.Skip(err)
	return ""
}

// Start launches a redis-server with persistence off on a free loopback
// port and waits until it answers. Extra arguments are passed to the server
// (for example "--requirepass", "secret").
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return start(tb, redisproc.Config{Bin: Binary(tb), Dir: tb.TempDir(), Args: args})
}

func start(tb testing.TB, cfg redisproc.Config) *Server {
	tb.Helper()
	s, err := redisproc.Start(cfg)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Kill)
	return &Server{tb: tb, Server: s}
}

// Restart kills the server if it runs and starts it again on the same port;
// the test fails if it does not come back.
func (s *Server) Restart() {
	s.tb.Helper()
	if err := s.Server.Restart(); err != nil {
		s.tb.Fatal(err)
	}
}

// Pause stops the server process with SIGSTOP: connections stay open but
// nothing is answered until Resume.
func (s *Server) Pause() {
	s.tb.Helper()
	if err := s.Server.Pause(); err != nil {
		s.tb.Fatal(err)
	}
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() {
	s.tb.Helper()
	if err := s.Server.Resume(); err != nil {
		s.tb.Fatal(err)
	}
}
