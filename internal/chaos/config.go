package chaos

import (
	"fmt"
	"io"
	"time"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/faultproxy"
)

// A run's parameters: Config, the run `make chaos` makes of each mode, and
// their validation.

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

	// Claims are the heard mode's faults: claims after a handoff delayed,
	// dropped or their replies lost, handoff messages held on arrival. Each
	// client injects them below its go-redis client (claimfaults.go).
	Claims ClaimFaults

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
	c.modeDefaults(mode)
	// Held-back requests (H10), past the client's read timeout: the client
	// has given up and gone on, and the request lands after its later ones.
	c.Network.HoldRate = 0.001
	c.Network.MinHold, c.Network.MaxHold = c.ReadTimeout+10*time.Millisecond, 3*c.ReadTimeout
	return c
}

// modeDefaults changes the defaults where a mode needs its own.
func (c *Config) modeDefaults(mode string) {
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
	case ModeHeard:
		// A handoff is a provisional hold until the claim lands: a claim
		// held back up to 1.6 claim windows lands after the provisional
		// end (some past the client's read timeout, after it gave up), or
		// never; a handoff heard up to 1.2 claim windows late is heard
		// after that end. A handoff's fate holds for every claim of it (a
		// claim can fail for good); 6%, 3%, 3% of handoffs keep the mode
		// within its minute of make chaos (10%, 5%, 5% took 65s).
		c.Claims = ClaimFaults{DelayRate: 0.06, DropRate: 0.03, LoseRate: 0.03, MaxDelay: handoffClaimWindow * 8 / 5,
			HoldRate: 0.1, MaxHold: handoffClaimWindow * 6 / 5}
	case ModeFormats:
		// UnixSeconds leases last up to two seconds: more keys keep the run
		// going while crashed holders' keys wait out their leases.
		c.Keys = 14
		c.KillRate, c.CrashRate, c.ReleaseKillRate = c.KillRate/2, c.CrashRate/2, c.ReleaseKillRate/2
	case ModeSemaphore:
		c.Keys = SemaphorePermits // a key per permit: lockKeys
		// A semaphore's Acquire waits on every permit, so the release of
		// each announces it: the same share of waits cancelled per call
		// as in the other modes.
		c.HandoffCancelRate /= SemaphorePermits
		// Three keys turn over as fast as three of another mode's nine
		// (about 30 grants a second each, here as there, the faults'
		// long holds, kills and pauses included): 10⁴ acquisitions take
		// about 110s on an idle machine, 150s on a loaded one, past the
		// others' 100s limit. A bound for a stuck run, not an expectation.
		c.Duration = 240 * time.Second
	case ModeRWLock:
		c.Keys = 1 // the writer key (lockKeys)
		// One lock for every client: each crashed, stopped or in-doubt
		// holder holds up everyone for a lease (a reader every writer, and
		// the readers queued behind it), where in the other modes it holds
		// up one key of nine, and readers queued behind a writer are
		// admitted one handoff apart. 10⁴ acquisitions took about 200s on
		// the loaded 2-core machine without fencing (halving every fault's
		// rate, or having half the writers, gained under 10%), 243s and 252s with
		// half the Lockers fencing, whose calls are slower. A bound for a
		// stuck run, not an expectation.
		c.Duration = 360 * time.Second
	case ModeMulti:
		c.Keys = multiKeys
		// A group's call waits on each of its keys, so the release of each
		// announces it: the same share of waits cancelled per call as in
		// the other modes, for a group of two or three.
		c.HandoffCancelRate /= 2.5
		c.Duration = 240 * time.Second // a bound for a stuck run, not an expectation
	case ModeCluster:
		c.RevokeACL = false // ACL users are per node; the single-server modes cover revocation
	case ModeAutoRefresh, ModeElection:
		// A goroutine told to crash cannot stop its locks' renewals short of
		// releasing them: only process kills crash holders here.
		c.CrashRate = 0
	}
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

// partitionLength is how long a partition lasts, for a uniform draw u in
// [0, 1): past the lease and a renewal's read timeout, so that a renewal
// sent into it outlives the lease unless the library cuts it short.
func (c Config) partitionLength(u float64) time.Duration {
	return c.TTL + c.ReadTimeout + time.Duration(u*float64(c.ReadTimeout))
}

// fenced reports whether the run's clients hold fencing tokens, which the
// resource then enforces: WithFencing, or an election's terms.
func (c Config) fenced() bool { return c.Mode == ModeFencing || c.Mode == ModeElection }

// lockKeys are the run's lock keys: "chaos.k<i>", or in an election run
// the elections' lock keys, "{chaos.k<i>}.election" (setnxlock.ElectionKey),
// or in a semaphore run its permit keys, "{chaos.s}.permit.<i>"
// (setnxlock.PermitKey), c.Keys of them: its count; in an rwlock run, its
// read/write lock's writer key alone, "{chaos.rw}.writer" (the readers'
// keys are made as they come).
func (c Config) lockKeys() []string {
	if name := c.rwLock(); name != "" {
		return []string{setnxlock.WriterKey(name)} // whatever c.Keys says
	}
	out := make([]string, c.Keys)
	for i := range out {
		out[i] = fmt.Sprintf("chaos.k%d", i)
		switch c.Mode {
		case ModeElection:
			out[i] = setnxlock.ElectionKey(out[i])
		case ModeSemaphore:
			out[i] = setnxlock.PermitKey(SemaphoreName, i)
		}
	}
	return out
}
