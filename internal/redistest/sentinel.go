package redistest

import (
	"os"
	"testing"
	"time"

	"github.com/setnxlock/setnxlock/internal/redisproc"
)

// SentinelConfig tunes a Sentinel deployment; the zero value takes every
// default (down-after 1.5s, failover-timeout 2s). Its binaries and
// directory are filled in by StartSentinel.
type SentinelConfig = redisproc.SentinelConfig

// Sentinel is a Redis Sentinel deployment owned by a test: one primary, two
// replicas and three sentinels on loopback (see redisproc.Sentinel), killed
// when the test ends. Its methods fail the test instead of returning
// errors; the data servers it returns are redisproc's, whose own Kill,
// Pause, Resume and Restart act on the process alone.
type Sentinel struct {
	tb testing.TB
	*redisproc.Sentinel
}

// SentinelBinary returns how to run Redis Sentinel (see
// redisproc.SentinelBinary). When it cannot, the test is skipped, or fails
// when the CI environment variable is "true", as with Binary.
func SentinelBinary(tb testing.TB) (bin string, args []string) {
	tb.Helper()
	bin, args, err := redisproc.SentinelBinary()
	if err == nil {
		return bin, args
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal(err)
	}
	tb.Skip(err)
	return "", nil
}

// StartSentinel starts a deployment in a directory of the test's and
// returns once it is healthy (a few seconds: see redisproc.StartSentinel).
// cfg's Bin, SentinelBin, SentinelArgs and Dir are set here; set its
// other fields, or pass SentinelConfig{} for the defaults.
func StartSentinel(tb testing.TB, cfg SentinelConfig) *Sentinel {
	tb.Helper()
	cfg.Bin = Binary(tb)
	cfg.SentinelBin, cfg.SentinelArgs = SentinelBinary(tb)
	cfg.Dir = tb.TempDir()
	d, err := redisproc.StartSentinel(cfg)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(d.Kill)
	return &Sentinel{tb: tb, Sentinel: d}
}

// Primary returns the data server every running sentinel reports as the
// primary; the test fails when they disagree (during a failover) or one
// does not answer.
func (d *Sentinel) Primary() *redisproc.Server {
	d.tb.Helper()
	p, err := d.Sentinel.Primary()
	if err != nil {
		d.tb.Fatal(err)
	}
	return p
}

// Replicas returns the data servers other than Primary, whether they run
// or not.
func (d *Sentinel) Replicas() []*redisproc.Server {
	d.tb.Helper()
	r, err := d.Sentinel.Replicas()
	if err != nil {
		d.tb.Fatal(err)
	}
	return r
}

// KillPrimary ends the current primary with SIGKILL and returns it.
func (d *Sentinel) KillPrimary() *redisproc.Server {
	d.tb.Helper()
	p, err := d.Sentinel.KillPrimary()
	if err != nil {
		d.tb.Fatal(err)
	}
	return p
}

// PausePrimary stops the current primary with SIGSTOP and returns it, for
// Resume.
func (d *Sentinel) PausePrimary() *redisproc.Server {
	d.tb.Helper()
	p, err := d.Sentinel.PausePrimary()
	if err != nil {
		d.tb.Fatal(err)
	}
	return p
}

// WaitForPromotion waits up to timeout until every running sentinel reports
// a primary other than old (host:port) and it answers as a master; it
// returns that primary and how long the wait took. The test fails, with
// the sentinels' last log lines, when that does not happen in time.
func (d *Sentinel) WaitForPromotion(old string, timeout time.Duration) (*redisproc.Server, time.Duration) {
	d.tb.Helper()
	p, took, err := d.Sentinel.WaitForPromotion(old, timeout)
	if err != nil {
		d.tb.Fatal(err)
	}
	return p, took
}

// WaitHealthy waits up to timeout until every running process is back in
// its place (see redisproc.Sentinel.WaitHealthy); the test fails if not.
func (d *Sentinel) WaitHealthy(timeout time.Duration) {
	d.tb.Helper()
	if err := d.Sentinel.WaitHealthy(timeout); err != nil {
		d.tb.Fatal(err)
	}
}

// Restart brings a data server back as a replica of the current primary
// (or as the primary, when no failover happened) and waits until the
// deployment is healthy; the test fails if it is not.
func (d *Sentinel) Restart(s *redisproc.Server) {
	d.tb.Helper()
	if err := d.Sentinel.Restart(s); err != nil {
		d.tb.Fatal(err)
	}
}

// Resume continues a paused data server, makes it a replica of the current
// primary unless it still is the primary, and waits until the deployment
// is healthy; the test fails if it is not.
func (d *Sentinel) Resume(s *redisproc.Server) {
	d.tb.Helper()
	if err := d.Sentinel.Resume(s); err != nil {
		d.tb.Fatal(err)
	}
}
