package chaos

import (
	"fmt"
	"io"
	"time"

	"github.com/setnxlock/setnxlock/internal/faultproxy"
)

// Config is one run of the harness. DefaultConfig gives a run under the
// README's assumptions; Break turns one of them off.
type Config struct {
	Seed uint64 // every random decision of the run derives from it

	// The run stops at whichever comes first: Acquisitions recorded (0: no
	// limit), Duration elapsed, or the context ending.
	Acquisitions int
	Duration     time.Duration

	Goroutines int // lock clients inside the harness's process
	Procs      int // lock clients as OS processes, each restarted after it is killed
	Keys       int // lock keys; every client picks one at random for each acquisition

	TTL                    time.Duration // lease length
	Skew                   time.Duration // clocks are offset within [-Skew/2, Skew/2], so any two disagree by at most Skew
	Margin                 time.Duration // WithSkewMargin; the assumption is Skew <= Margin
	MinBackoff, MaxBackoff time.Duration // WithBackoff
	ReadTimeout            time.Duration // go-redis's read and write timeouts
	LongHoldRate           float64       // share of critical sections that write until the lease's very end

	Network      faultproxy.Faults // latency, lost replies and cut connections; its Seed is set from Seed
	KillRate     float64           // per write of a process client: SIGKILL inside the critical section
	PauseRate    float64           // per write of a process client: SIGSTOP past the lease, then SIGCONT
	CrashRate    float64           // per write of a goroutine client: abandon the lock, as if crashed
	StallRate    float64           // per write of a goroutine client: stall past the lease
	RestartEvery int               // acquisitions between redis-server restarts (0: never)
	Persistence  bool              // appendonly yes + appendfsync always; the assumption for restarts

	ClientTags   string    // build tags of the client program (OwnerCheckOffTag breaks the owner check)
	ClientBinary string    // a client program already built with ClientTags; built into a temporary directory if empty
	Log          io.Writer // progress lines; nil for none
}

// DefaultConfig is the run `make chaos` makes, every assumption holding:
// skew within the margin, restarts with persistence, the owner check on.
func DefaultConfig() Config {
	return Config{
		Seed:         1,
		Acquisitions: 10_000,
		Duration:     100 * time.Second,
		Goroutines:   8,
		Procs:        4,
		Keys:         6,
		TTL:          200 * time.Millisecond,
		Skew:         20 * time.Millisecond,
		Margin:       20 * time.Millisecond,
		MinBackoff:   time.Millisecond,
		MaxBackoff:   20 * time.Millisecond,
		ReadTimeout:  100 * time.Millisecond,
		LongHoldRate: 0.01,
		Network: faultproxy.Faults{
			LatencyRate: 0.05, MaxLatency: 2 * time.Millisecond,
			LoseRate: 0.001, CutRate: 0.001,
		},
		KillRate:     0.01,
		PauseRate:    0.005,
		CrashRate:    0.002,
		StallRate:    0.002,
		RestartEvery: 2500,
		Persistence:  true,
	}
}

// The assumptions a run can break.
const (
	BreakSkew                 = "skew"                   // clocks disagree by far more than the margin
	BreakRestartNoPersistence = "restart-no-persistence" // restarts lose every key and the fencing counters
	BreakOwnerCheck           = "owner-check"            // clients built with the owner check off
)

// Breaks lists the assumptions Break knows.
var Breaks = []string{BreakSkew, BreakRestartNoPersistence, BreakOwnerCheck}

// Break changes c so that one assumption no longer holds, in a way that
// makes its failure likely within a short run.
func (c *Config) Break(kind string) error {
	switch kind {
	case BreakSkew:
		// Clocks up to two leases apart against a margin a tenth of the skew
		// the default run tolerates.
		c.Skew, c.Margin = 2*c.TTL, c.Margin/10
		c.LongHoldRate = max(c.LongHoldRate, 0.2)
	case BreakRestartNoPersistence:
		c.Persistence = false
		c.RestartEvery = max(c.RestartEvery/10, 50)
	case BreakOwnerCheck:
		// Every client must run the broken build, so all are processes; a
		// paused holder's late Release then deletes its successor's lock.
		c.ClientTags = OwnerCheckOffTag
		c.Procs, c.Goroutines = c.Procs+c.Goroutines, 0
		c.PauseRate = max(c.PauseRate, 0.1)
		c.KillRate = 0
		c.LongHoldRate = max(c.LongHoldRate, 0.3)
	default:
		return fmt.Errorf("chaos: unknown assumption %q to break (know %v)", kind, Breaks)
	}
	return nil
}

func (c Config) validate() error {
	switch {
	case c.Goroutines < 0 || c.Procs < 0 || c.Goroutines+c.Procs == 0:
		return fmt.Errorf("chaos: need at least one client, got %d goroutines and %d processes", c.Goroutines, c.Procs)
	case c.Keys < 1:
		return fmt.Errorf("chaos: need at least one key")
	case c.Acquisitions <= 0 && c.Duration <= 0:
		return fmt.Errorf("chaos: need -acquisitions or -duration to end the run")
	case c.TTL <= 0 || c.ReadTimeout <= 0 || c.Skew < 0 || c.Margin < 0:
		return fmt.Errorf("chaos: TTL and read timeout must be positive, skew and margin not negative")
	}
	return nil
}

// recoveryBound is how soon a crashed holder's lease must be taken over
// (see Bounds.Recovery): the margin and the skew, by which the waiter's
// clock may see the lease end late; one backoff step; and an allowance of
// three read timeouts for a recovery whose round trips the network faults
// hit (a lost reply stalls its command a read timeout, and go-redis may
// retry), plus 100ms for scheduling on a loaded machine.
func (c Config) recoveryBound() time.Duration {
	return c.Margin + c.Skew + c.MaxBackoff + 3*c.ReadTimeout + 100*time.Millisecond
}
