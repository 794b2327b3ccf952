package chaos

import (
	"fmt"
	"time"
)

// The checks' parameters (Bounds), and the bounds of a run, derived from
// its Config: how soon a crashed lease is recovered, how long a free wait
// may last, how soon every key is acquired once the faults stop.

// Bounds parameterise the checks.
type Bounds struct {
	// Recovery is how long after a crashed holder's lease ended the next
	// acquisition of its key may come: the skew margin, the skew between
	// the two clients' clocks, one backoff step, and an allowance for a
	// round trip the network faults delayed. Time the server spent down,
	// and time the machine stalled (stalls.go), is added to it.
	Recovery time.Duration
	// FreeWait bounds how long a waiter may wait for a key nobody holds;
	// 0: not checked.
	FreeWait time.Duration
	// Takeover is how long after a lease's end by its holder's clock any
	// other client may take it over at the latest: the skew margin plus
	// the skew.
	Takeover time.Duration
	// Lease is the longest lease a client of the run writes (the TTL, or
	// more in a format that rounds up): how long a write nobody knows it
	// owns can keep a key (Call.InDoubt). LeaseOf, when set, gives it
	// client by client.
	Lease   time.Duration
	LeaseOf func(client string) time.Duration `json:"-"`
	// HeldPastOf, when set, gives how long past the end of its lease a
	// client's unreleased lease (crashed, lost, its release refused) may
	// rightly keep its key: readers hold a whole second's value through
	// the end of that second, until the safety net (H6) ends it. It is
	// added to Recovery for that holder, and a free wait for its key
	// starts that much later.
	HeldPastOf func(client string) time.Duration `json:"-"`
	// ClaimWindow is how long a release's handoff value lasts when the
	// waiter it names never claims it (the library's claimWindow): the
	// documented cost of a waiter that left just as it was handed the
	// key, or whose Locker stopped listening. A free wait the key spent
	// holding such a value is not the library's to shorten; a handed
	// value that states a longer lease is (heldBy).
	ClaimWindow time.Duration
	// Fenced: the clients use fencing tokens, so the resource's fence and
	// the tokens' order are checked too.
	Fenced bool
	// UntilLost, when set, names the group (for the report) of a client
	// that works until its lock tells it of a loss, and "" for one that
	// checks its lease itself; the first kind's sections are checked for
	// work after loss (lossSignals).
	UntilLost func(client string) string `json:"-"`
	// LossSlack is how long past its lease's end such a holder may work
	// untold: the time to schedule it once the loss is signalled.
	LossSlack time.Duration
	// Semaphore, when set, names the semaphore whose permits the run's
	// keys are, and Permits is its count: no more than that many
	// sections on its permit keys may overlap (permitsExceeded), and a
	// call of the semaphore is a call of each permit (semaphoreCalls).
	Semaphore string `json:",omitempty"`
	Permits   int    `json:",omitempty"`
	// RWLock, when set, names the read/write lock whose keys the run's
	// acquisitions are: no writer's section may overlap another on them
	// (writerOverlaps), and its keys are one for the liveness checks
	// (livenessKey).
	RWLock string `json:",omitempty"`
}

// recoveryOf is the recovery bound of a crashed lease of client.
func (b Bounds) recoveryOf(client string) time.Duration {
	return b.Recovery + b.heldPast(client)
}

// heldPast is how long past its end an unreleased lease of client may
// keep its key (HeldPastOf).
func (b Bounds) heldPast(client string) time.Duration {
	if b.HeldPastOf != nil {
		return b.HeldPastOf(client)
	}
	return 0
}

// lease is the longest lease client writes.
func (b Bounds) lease(client string) time.Duration {
	if b.LeaseOf != nil {
		return b.LeaseOf(client)
	}
	return b.Lease
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

// finalBound is how soon after the faults stop every key must be acquired,
// and every queue of waiters empty: the longest lease a dead client may
// have left, plus a recovery.
func (c Config) finalBound() time.Duration {
	return longestLease(c.Mode, c.TTL) + c.recoveryBound()
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
		LossSlack: schedulingSlack, Semaphore: c.semaphore(), Permits: c.permits(), RWLock: c.rwLock(),
		UntilLost: func(client string) string {
			return lockerFor(c.Mode, slotOf(client, c.Goroutines)).lossGroup()
		}}
}
