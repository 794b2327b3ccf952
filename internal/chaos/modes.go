package chaos

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/setnxlock/setnxlock"
)

// A mode is one configuration of the public API that the library ships,
// run under faults: which options each client's Locker gets, and on what
// servers. Every mode runs the same clients, faults and checks; only what
// cannot apply is left out (ACL revocations on a Cluster, the fenced
// resource without fencing tokens).

// The modes `make chaos` runs, in order.
const (
	ModeDefault     = "default"     // setnxlock.New(client): scripts, queue, adaptive barging and handoff
	ModeNoScripts   = "noscripts"   // WithoutScripts: the command path, its queue and handoff with commands alone (commandqueue.go)
	ModeClassic     = "classic"     // WithClassicCommands: SETNX and PEXPIRE, no SET options
	ModeFormats     = "formats"     // TokenFormat, UnixMillis, UnixSeconds and FloatSeconds Lockers on the same keys
	ModeAutoRefresh = "autorefresh" // WithAutoRefresh, holders keeping locks past one TTL
	ModeFencing     = "fencing"     // WithFencing, half of them WithoutScripts; the fenced resource checked
	ModeCluster     = "cluster"     // default Lockers on a 3-master Redis Cluster the harness starts
	ModeMixed       = "mixed"       // default, in-order handoff, polling and bare-format Lockers on the same keys
	ModeElection    = "election"    // Campaign and Resign: each key an election's lock, each term a fencing token
	ModePartition   = "partition"   // WithAutoRefresh holders working until told of a loss, one at a time cut off from Redis (H11)
	ModeHeard       = "heard"       // queueing Lockers, half WithoutScripts, holders working until Done; handoff messages held on arrival, claims delayed or dropped
	ModeSemaphore   = "semaphore"   // permits of one semaphore (Semaphore.Acquire and TryAcquire), half WithoutScripts; at most its count of holders at once
	ModeRWLock      = "rwlock"      // one read/write lock, 90% readers (RLock, TryRLock), 10% writers (Lock, TryLock), half WithFencing, half WithoutScripts; never a writer beside anyone
	ModeMulti       = "multi"       // groups of 2–3 of 4 keys (AcquireMany, TryAcquireMany) in random orders beside single keys, half WithoutScripts
)

// Modes lists every mode, in the order `make chaos` runs them.
var Modes = []string{ModeDefault, ModeNoScripts, ModeClassic, ModeFormats, ModeAutoRefresh, ModeFencing, ModeCluster, ModeMixed, ModeElection, ModePartition, ModeHeard, ModeSemaphore, ModeRWLock, ModeMulti}

// LockerConfig is the part of a client's configuration that is a choice of
// the library's options.
type LockerConfig struct {
	Format      setnxlock.Format
	NoScripts   bool // WithoutScripts
	Classic     bool // WithClassicCommands
	AutoRefresh bool // WithAutoRefresh
	Fencing     bool // WithFencing
	InOrder     bool // WithStarvationThreshold(0): every release hands over in order, no barging
	// Election: the loops Campaign for the election whose lock is the key
	// (ElectionKey) and Resign, instead of Acquire and Release. A
	// leadership renews itself and its term is a fencing token, whatever
	// the Locker's options.
	Election bool
	// User is the ACL user the client logs in as: UserChaos, whose
	// scripting and pub/sub the harness revokes for a while mid-run, or
	// UserPoller, which may never use pub/sub, so its Lockers poll.
	User string
	// UntilLost: the holder works until its Lock tells it of a loss
	// (Done), as code under Lock.Context does, instead of checking its
	// lease by its own clock before each write; the checker then asks
	// whether the loss was signalled by the lease's end (WorkAfterLoss).
	UntilLost bool
	// ContextTimeout is go-redis's ContextTimeoutEnabled for the client:
	// off (go-redis's default), a round trip ends only at the client's
	// ReadTimeout whatever the context says.
	ContextTimeout bool
	// Semaphore, when set, names the semaphore whose permits the loops
	// take (Semaphore.Acquire, some TryAcquire) instead of locking a key:
	// its permits are the worker's keys, one per permit (semaphore.go).
	Semaphore string `json:",omitempty"`
	// RWLock, when set, names the read/write lock the loops take, read
	// or write (rwlock.go), instead of locking a key.
	RWLock string `json:",omitempty"`
	// Multi: the loops lock groups of the worker's keys at once
	// (AcquireMany, TryAcquireMany) as well as single keys (multi.go).
	Multi bool `json:",omitempty"`
}

// The ACL users of single-server runs (aclUsers). Cluster runs log in as
// the default user.
const (
	UserChaos  = "chaos"
	UserPoller = "poller"
)

// Options turns the configuration into the Locker's options, after the
// ones every client shares.
func (c LockerConfig) Options() []setnxlock.Option {
	var opts []setnxlock.Option
	if c.Format != setnxlock.TokenFormat {
		opts = append(opts, setnxlock.WithFormat(c.Format))
	}
	if c.NoScripts {
		opts = append(opts, setnxlock.WithoutScripts())
	}
	if c.Classic {
		opts = append(opts, setnxlock.WithClassicCommands())
	}
	if c.AutoRefresh {
		opts = append(opts, setnxlock.WithAutoRefresh())
	}
	if c.Fencing {
		opts = append(opts, setnxlock.WithFencing())
	}
	if c.InOrder {
		opts = append(opts, setnxlock.WithStarvationThreshold(0))
	}
	return opts
}

// String names the configuration in reports, e.g. "UnixSeconds+noscripts".
func (c LockerConfig) String() string {
	parts := []string{c.Format.String()}
	for _, f := range []struct {
		on   bool
		name string
	}{{c.NoScripts, "noscripts"}, {c.Classic, "classic"}, {c.AutoRefresh, "autorefresh"}, {c.Fencing, "fencing"}, {c.InOrder, "inorder"}, {c.Election, "election"}, {c.User == UserPoller, "poller"}, {c.UntilLost, "untillost"}, {c.ContextTimeout, "ctxtimeout"}, {c.Semaphore != "", "semaphore"}, {c.RWLock != "", "rwlock"}, {c.Multi, "multi"}} {
		if f.on {
			parts = append(parts, f.name)
		}
	}
	return strings.Join(parts, "+")
}

// lockerFor is the Locker configuration of client slot in mode.
func lockerFor(mode string, slot int) LockerConfig {
	c := LockerConfig{User: UserChaos}
	switch mode {
	case ModeNoScripts:
		c.NoScripts = true
	case ModeClassic:
		c.Classic = true
	case ModeFormats:
		c.Format = []setnxlock.Format{setnxlock.TokenFormat, setnxlock.UnixMillis, setnxlock.UnixSeconds, setnxlock.FloatSeconds}[slot%4]
	case ModeAutoRefresh:
		c.AutoRefresh = true
	case ModeFencing:
		c.Fencing, c.NoScripts = true, slot%4 >= 2 // half on the script fast path, half on the commands alone
	case ModeCluster:
		c.User = ""
	case ModeElection:
		c.Election, c.Fencing, c.AutoRefresh = true, true, true // Fencing and AutoRefresh for finalChecks' Acquire of the same keys
		c.NoScripts = slot%4 >= 2                               // half on the scripts, half on the commands alone
	case ModePartition:
		c.AutoRefresh, c.UntilLost = true, true
		c.ContextTimeout = slot%4 >= 2 // half go-redis's default, half ContextTimeoutEnabled; each half with and without retries
	case ModeHeard:
		// A handoff is a provisional hold: the holder relies on its Lock to
		// end at the provisional end when its claim fails, as code under
		// Lock.Context does; half on the scripted path (queued.lua claims),
		// half on the command path (the watched claim).
		c.UntilLost = true
		c.NoScripts = slot%4 >= 2
	case ModeSemaphore:
		// Every permit is a lock key of the Locker's options: half on the
		// scripts, half on the commands alone, on the same permits.
		c.Semaphore = SemaphoreName
		c.NoScripts = slot%4 >= 2
	case ModeRWLock, ModeMulti:
		// Readers and writers, or groups and single keys, are lock keys
		// of the Locker's options: half on the scripts, half on the
		// commands alone, on the same lock or keys.
		if mode == ModeRWLock {
			// Half WithFencing too, on each path: a writer's token above
			// every earlier holder's, a reader's above the last writer's
			// (rwTokenOrder). Every Locker fencing took half as long again
			// (8575 acquisitions in 300s), and the queued-attempt faults
			// miss the fenced acquire script (queuedAttempt).
			c.RWLock, c.Fencing = RWLockName, slot%2 == 1
		}
		c.Multi = mode == ModeMulti
		c.NoScripts = slot%4 >= 2
	case ModeMixed:
		switch slot % 4 {
		case 1:
			c.InOrder = true
		case 2:
			c.User = UserPoller
		case 3:
			c.Format = []setnxlock.Format{setnxlock.UnixMillis, setnxlock.FloatSeconds}[slot/4%2]
		}
	}
	return c
}

// longestLease is the longest lease a Locker of the mode writes: the TTL,
// or in UnixSeconds a TTL rounded up to the next second plus the page's
// extra second.
func longestLease(mode string, ttl time.Duration) time.Duration {
	if mode == ModeFormats {
		return ttl + 2*time.Second
	}
	return ttl + time.Millisecond
}

// leaseOf is the longest lease a Locker so configured writes.
func (c LockerConfig) leaseOf(ttl time.Duration) time.Duration {
	switch c.Format {
	case setnxlock.UnixSeconds:
		return ttl + 2*time.Second
	case setnxlock.UnixMillis:
		return ttl + time.Millisecond
	}
	return ttl
}

// heldPast is how long past the end of its lease, by its holder's clock,
// a crashed lease of a Locker so configured may rightly keep its key:
// readers hold a whole second's value through the end of that second
// (heldUntil in the library), and the safety net (H6), which the chaos
// Lockers leave at its default grace of one TTL, ends it before that.
func (c LockerConfig) heldPast(ttl time.Duration) time.Duration {
	if c.Format == setnxlock.UnixSeconds {
		return min(ttl, time.Second)
	}
	return 0
}

// lossGroup names, for the report's loss signals, the configuration of a
// holder that works until told of a loss (UntilLost); "" for one that
// checks its lease itself.
func (c LockerConfig) lossGroup() string {
	switch {
	case !c.UntilLost:
		return ""
	case c.ContextTimeout:
		return "ContextTimeoutEnabled"
	}
	return "go-redis-default"
}

// slotOf is the client slot of a loop's name: "g3.1/2" is goroutine slot
// 3, "p1.0/0" process slot 1, which comes after the goroutines' slots.
func slotOf(loop string, goroutines int) int {
	name := processOf(loop)
	dot := strings.IndexByte(name, '.')
	if len(name) < 2 || dot < 0 {
		return 0
	}
	n, err := strconv.Atoi(name[1:dot])
	if err != nil {
		return 0
	}
	if name[0] == 'p' {
		n += goroutines
	}
	return n
}

// checkMode refuses a mode the harness does not know.
func checkMode(mode string) error {
	for _, m := range Modes {
		if m == mode {
			return nil
		}
	}
	return fmt.Errorf("chaos: unknown mode %q (know %s)", mode, strings.Join(Modes, ", "))
}
