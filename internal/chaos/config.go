package chaos

import (
	"fmt"
	"io"
	"time"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/faultproxy"
)

// Config is one run of the harness. DefaultConfig gives a run under the
// README's assumptions; Break turns one of them off.
type Config struct {
	Mode string // one of Modes: which configuration of the library the clients run
	Seed uint64 // every random decision of the run derives from it

	// The run stops at whichever comes first: Acquisitions recorded (0: no
	// limit), Duration elapsed, or the context ending.
	Acquisitions int
	Duration     time.Duration

	Goroutines int // lock clients inside the harness's process
	Procs      int // lock clients as OS processes, each restarted after it is killed
	Loops      int // acquisition loops per client, sharing its Locker
	Keys       int // lock keys; every client picks one at random for each acquisition

	TTL                    time.Duration // lease length
	Skew                   time.Duration // clocks are offset within [-Skew/2, Skew/2], so any two disagree by at most Skew
	Margin                 time.Duration // WithSkewMargin; the assumption is Skew <= Margin
	MinBackoff, MaxBackoff time.Duration // WithBackoff
	ReadTimeout            time.Duration // go-redis's read and write timeouts
	LongHoldRate           float64       // share of critical sections that write until the lease's very end

	Network      faultproxy.Faults // latency, lost replies, cut connections and held-back requests; its Seed is set from Seed
	KillRate     float64           // per write of a process client: SIGKILL inside the critical section
	PauseRate    float64           // per write of a process client: SIGSTOP past the lease, then SIGCONT
	CrashRate    float64           // per write of a goroutine client: abandon the lock, as if crashed
	StallRate    float64           // per write of a goroutine client: stall past the lease
	RestartEvery int               // acquisitions between redis-server restarts (0: never)
	Persistence  bool              // appendonly yes + appendfsync always; the assumption for restarts

	// The faults of the waiting paths.
	CancelRate        float64       // per Acquire: its context ends at a random moment within two leases
	HandoffCancelRate float64       // per release of a key: each Acquire waiting on it is cancelled within 3ms
	CloseEvery        time.Duration // mean time between Locker.Close calls of a client while its Acquires wait (0: never)
	GrantPauseRate    float64       // per acquisition: the holder is stopped (SIGSTOP) or stalled past its lease right after the grant
	ReleaseKillRate   float64       // per release of a process client: SIGKILL within 2ms of sending it
	WaiterKillEvery   time.Duration // mean time between SIGKILLs of a process client with an Acquire waiting (0: never)
	PubSubKillEvery   time.Duration // mean time between CLIENT KILL TYPE pubsub (0: never)
	ScriptFlushEvery  time.Duration // mean time between SCRIPT FLUSH (0: never)
	RevokeACL         bool          // revoke pub/sub, then scripting, from the clients' ACL user for a tenth of the run each
	QueuedLoseRate    float64       // per queued attempt (the acquire script with a queue entry): its reply is lost
	QueuedHoldRate    float64       // per queued attempt: held back past the read timeout (Network.MinHold to MaxHold), then delivered (issue 28's L1)
	OOMEvery          time.Duration // mean time between 30ms spells of maxmemory 1, when writes that need memory fail with OOM (0: never)

	// PartitionEvery is the mean time from the end of one partition to the
	// start of the next (0: none): a client holding a lock inside a long
	// critical section is cut off from Redis, its proxy frozen (nothing
	// closed) for partitionLength, while every other client reaches
	// Redis. Only in the partition mode, where each client has a proxy of
	// its own.
	PartitionEvery time.Duration

	ClientTags   string    // build tags of the client program (OwnerCheckOffTag breaks the owner check)
	ClientBinary string    // a client program already built with ClientTags; built into a temporary directory if empty
	Log          io.Writer `json:"-"` // progress lines; nil for none
}

// DefaultConfig is the run of a mode that `make chaos` makes, every
// assumption holding: skew within the margin, restarts with persistence,
// the owner check on.
func DefaultConfig(mode string) Config {
	c := Config{
		Mode:         mode,
		Seed:         1,
		Acquisitions: 10_000,
		Duration:     100 * time.Second,
		Goroutines:   8,
		Procs:        4,
		Loops:        3,
		Keys:         9,
		TTL:          300 * time.Millisecond,
		Skew:         20 * time.Millisecond,
		Margin:       20 * time.Millisecond,
		MinBackoff:   time.Millisecond,
		MaxBackoff:   20 * time.Millisecond,
		ReadTimeout:  50 * time.Millisecond,
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

		CancelRate:        0.02,
		HandoffCancelRate: 0.05,
		CloseEvery:        time.Second,
		GrantPauseRate:    0.002,
		ReleaseKillRate:   0.002,
		WaiterKillEvery:   2 * time.Second,
		PubSubKillEvery:   time.Second,
		ScriptFlushEvery:  2 * time.Second,
		RevokeACL:         true,
		QueuedLoseRate:    0.02,
		QueuedHoldRate:    0.02,
		OOMEvery:          2 * time.Second,
	}
	switch mode {
	case ModePartition:
		// The finding of issue 22 scaled to the harness's lease: go-redis's
		// default ReadTimeout (3s) against a 2s lease is 1.5 leases, so a
		// renewal sent into a partition outlives the lease unless the
		// library bounds it (ContextTimeoutEnabled off). Every bound that
		// allows for a read timeout grows with it.
		c.ReadTimeout = c.TTL * 3 / 2
		c.CrashRate = 0 // as in autorefresh: a goroutine cannot stop its renewals short of Release
		c.LongHoldRate = 0.02
		c.PartitionEvery = 200 * time.Millisecond
	case ModeFormats:
		// UnixSeconds leases last up to two seconds: more keys keep the run
		// going while crashed holders' keys wait out their leases.
		c.Keys = 14
		c.KillRate, c.CrashRate, c.ReleaseKillRate = c.KillRate/2, c.CrashRate/2, c.ReleaseKillRate/2
	case ModeCluster:
		c.RevokeACL = false // ACL users are per node; the single-server modes cover revocation
	case ModeAutoRefresh, ModeElection:
		// A goroutine told to crash cannot stop its locks' renewals short of
		// releasing them: only process kills crash holders here.
		c.CrashRate = 0
	}
	// Held-back requests (H10), past the client's read timeout: the client
	// has given up and gone on, and the request lands after its later ones.
	c.Network.HoldRate = 0.001
	c.Network.MinHold, c.Network.MaxHold = c.ReadTimeout+10*time.Millisecond, 3*c.ReadTimeout
	return c
}

// The assumptions a run can break.
const (
	BreakSkew                 = "skew"                   // clocks disagree by far more than the margin
	BreakRestartNoPersistence = "restart-no-persistence" // restarts lose every key and the fencing counters
	BreakOwnerCheck           = "owner-check"            // clients built with the owner check off
)

// BrokenRuns are the runs `make chaos` makes with an assumption broken on
// purpose, each of which both checkers must catch (Caught): every mode
// once, the default mode twice (its owner-check run turns off the release
// script's owner check, so the script hands over a key that is not the
// releaser's: the handoff's own check).
var BrokenRuns = []struct{ Mode, Assumption string }{
	{ModeDefault, BreakOwnerCheck},
	{ModeDefault, BreakSkew},
	{ModeNoScripts, BreakOwnerCheck},
	{ModeClassic, BreakSkew},
	{ModeFormats, BreakSkew},
	{ModeAutoRefresh, BreakRestartNoPersistence},
	{ModeFencing, BreakRestartNoPersistence},
	{ModeCluster, BreakSkew}, // a restarted node is refused for seconds: longer than any critical section
	{ModeMixed, BreakOwnerCheck},
	{ModeElection, BreakRestartNoPersistence}, // terms start over: the fence catches it too
	{ModePartition, BreakSkew},
}

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
		// Holders keep their locks long enough to be inside a critical
		// section when the server forgets them, and a 500-acquisition
		// broken run sees about five restarts: with one (every 250) the
		// fencing run once lost nobody's section, and only the fence
		// caught it.
		c.Persistence = false
		c.RestartEvery = max(c.RestartEvery/25, 50)
		c.LongHoldRate = max(c.LongHoldRate, 0.3)
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
	if err := checkMode(c.Mode); err != nil {
		return err
	}
	switch {
	case c.Loops < 1:
		return fmt.Errorf("chaos: need at least one loop per client")
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
// clock may see the lease end late; one backoff step, or the announced
// poll (50ms) of a waiter that expects the holder to announce its
// release; an allowance of three read timeouts for a recovery whose round
// trips the network faults hit (a lost reply stalls its command a read
// timeout, and go-redis may retry); and 100ms for scheduling on a loaded
// machine.
func (c Config) recoveryBound() time.Duration {
	return c.Margin + c.Skew + max(c.MaxBackoff, 50*time.Millisecond) + 3*c.ReadTimeout + 100*time.Millisecond
}

// recoveryBoundText is the recovery bound as the report prints it, with
// what a whole second's lease adds (Bounds.HeldPastOf) where the mode
// writes one.
func (c Config) recoveryBoundText() string {
	var extra time.Duration
	for slot := range c.Goroutines + c.Procs {
		extra = max(extra, lockerFor(c.Mode, slot).heldPast(c.TTL))
	}
	if extra == 0 {
		return c.recoveryBound().String()
	}
	return fmt.Sprintf("%s (+%s for a whole second's lease)", c.recoveryBound(), extra)
}

// handoffClaimWindow is the library's claimWindow (scripts.go): how long a
// release's handoff value lasts when its waiter does not claim it.
const handoffClaimWindow = 250 * time.Millisecond

// freeWaitBound is how long a first waiter in line may wait on a key nobody
// holds: the announced poll of a waiter whose wake-up or handoff message
// was lost (50ms), a backoff step, the margin and the skew (by which its
// clock may see an abandoned lease end late), two round trips the network
// faults hit, and 80ms for scheduling on a loaded machine. It is shorter
// than a lease, so a key held for a whole lease by nobody is caught.
func (c Config) freeWaitBound() time.Duration {
	return 50*time.Millisecond + c.MaxBackoff + c.Margin + c.Skew + 2*c.ReadTimeout + schedulingSlack
}

// schedulingSlack is how late a loaded machine may run a goroutine that is
// due: a waiter's next attempt (freeWaitBound), or a holder's reaction to
// the loss of its lock (Bounds.LossSlack: the library signals the loss at
// the lease's end whatever is in flight, H11, and the holder then needs
// to be scheduled).
const schedulingSlack = 80 * time.Millisecond

// partitionLength is how long a partition lasts, for a uniform draw u in
// [0, 1): past the lease and a renewal's read timeout, so that a renewal
// sent into it outlives the lease unless the library cuts it short.
func (c Config) partitionLength(u float64) time.Duration {
	return c.TTL + c.ReadTimeout + time.Duration(u*float64(c.ReadTimeout))
}

// finalBound is how soon after the faults stop every key must be acquired,
// and every queue of waiters empty: the longest lease a dead client may
// have left, plus a recovery.
func (c Config) finalBound() time.Duration {
	return longestLease(c.Mode, c.TTL) + c.recoveryBound()
}

// fenced reports whether the run's clients hold fencing tokens, which the
// resource then enforces: WithFencing, or an election's terms.
func (c Config) fenced() bool { return c.Mode == ModeFencing || c.Mode == ModeElection }

// lockKeys are the run's lock keys: "chaos.k<i>", or in an election run
// the elections' lock keys, "{chaos.k<i>}.election" (setnxlock.ElectionKey).
func (c Config) lockKeys() []string {
	out := make([]string, c.Keys)
	for i := range out {
		out[i] = fmt.Sprintf("chaos.k%d", i)
		if c.Mode == ModeElection {
			out[i] = setnxlock.ElectionKey(out[i])
		}
	}
	return out
}

// bounds are the checks' parameters for this run.
func (c Config) bounds() Bounds {
	return Bounds{Recovery: c.recoveryBound(), FreeWait: c.freeWaitBound(), Takeover: c.Margin + c.Skew, ClaimWindow: handoffClaimWindow,
		Lease: longestLease(c.Mode, c.TTL), Fenced: c.fenced(),
		LeaseOf: func(client string) time.Duration {
			return lockerFor(c.Mode, slotOf(client, c.Goroutines)).leaseOf(c.TTL)
		},
		HeldPastOf: func(client string) time.Duration {
			return lockerFor(c.Mode, slotOf(client, c.Goroutines)).heldPast(c.TTL)
		},
		LossSlack: schedulingSlack,
		UntilLost: func(client string) string {
			return lockerFor(c.Mode, slotOf(client, c.Goroutines)).lossGroup()
		}}
}

// Caught names the checkers that found a violation in a run with an
// assumption broken, and those that should have and did not: the lease
// checker and Porcupine always; the fenced resource too when fencing
// tokens start over after a restart without persistence.
func Caught(res *Result) (caught, missed []string) {
	expect := []struct {
		name  string
		found bool
		due   bool
	}{
		{"lease", res.Report.Count(LeaseOverlap) > 0, true},
		{"porcupine", res.Report.Count(NotLinearizable) > 0, true},
		{"fence", res.Report.Count(FenceInterleave)+res.Report.Count(TokenOrder) > 0,
			res.Config.fenced() && !res.Config.Persistence},
	}
	for _, e := range expect {
		switch {
		case e.found:
			caught = append(caught, e.name)
		case e.due:
			missed = append(missed, e.name)
		}
	}
	if res.Report.Count(CheckersDisagree) > 0 {
		missed = append(missed, "agreement")
	}
	return caught, missed
}
