package chaos

import (
	"fmt"
)

// What the checkers report: the kinds of violation, which of them are about
// liveness, and one violation with the acquisitions involved.

// Kinds of violation Check reports.
const (
	// LeaseOverlap: two critical sections on one key overlapped in real
	// time, each inside its holder's lease by the holder's own clock —
	// mutual exclusion failed.
	LeaseOverlap = "lease-overlap"
	// FenceInterleave: the resource accepted a write of a holder after it
	// had accepted a write of a later holder of the same key — the fence
	// let a stale holder back in (fencing runs only).
	FenceInterleave = "fence-interleave"
	// TokenOrder: an acquisition that began after another had been granted
	// drew a fencing token no larger — tokens did not strictly increase
	// (fencing runs only).
	TokenOrder = "token-order"
	// PermitsExceeded: more critical sections on the permit keys of a
	// semaphore overlapped in real time than it has permits, each inside
	// its holder's lease by the holder's own clock (semaphore runs only).
	PermitsExceeded = "permits-exceeded"
	// WriterOverlap: a writer's critical section on a read/write lock
	// overlapped in real time another section of the same lock, a
	// reader's or a writer's, each inside its holder's lease by the
	// holder's own clock (rwlock runs only).
	WriterOverlap = "writer-overlap"
	// GroupPartial: a group lock's critical section overlapped another
	// holder's section on one of the group's keys: the group did not hold
	// all of its keys (multi runs only; each is a LeaseOverlap too).
	GroupPartial = "group-partial"
	// SlowRecovery: a crashed holder's key was not acquired again within
	// Bounds.Recovery of the end of its lease (liveness).
	SlowRecovery = "slow-recovery"
	// SlowFreeWait: a waiter waited longer than Bounds.FreeWait for a key
	// nobody held (liveness).
	SlowFreeWait = "slow-free-wait"
	// NotLinearizable: the second checker (Porcupine, linearize.go) found
	// no order of a key's acquire and release operations that a lock
	// allows.
	NotLinearizable = "not-linearizable"
	// CheckersDisagree: the two checkers disagree about a key: a bug in
	// one of them.
	CheckersDisagree = "checkers-disagree"
	// WorkAfterLoss: a holder that works until its lock tells it of a
	// loss was still working, untold, longer than Bounds.LossSlack past
	// the end of its lease by its own clock (H11): the others may hold
	// the key by then.
	WorkAfterLoss = "work-after-loss"

	// The liveness checks of the end of a run (final.go), once the faults
	// have stopped.

	// FinalAcquire: a key could not be acquired within Bounds.Final.
	FinalAcquire = "final-acquire"
	// QueueNotDrained: a key's queue of waiters still held entries after
	// every Locker had stopped and the bound had passed.
	QueueNotDrained = "queue-not-drained"
	// GoroutineGrowth: the harness had more goroutines after its Lockers
	// closed than before the run.
	GoroutineGrowth = "goroutine-growth"
)

// liveness reports whether a kind of violation is about liveness.
func liveness(kind string) bool {
	switch kind {
	case SlowRecovery, SlowFreeWait, FinalAcquire, QueueNotDrained, GoroutineGrowth:
		return true
	}
	return false
}

// Violation is one broken property, with the acquisitions involved.
type Violation struct {
	Kind   string
	Key    string
	First  AcqID // the earlier acquisition (or the crashed one for SlowRecovery)
	Second AcqID // the later one; empty when there is none
	Detail string
}

// String describes the violation on one line.
func (v Violation) String() string {
	return fmt.Sprintf("%s on %q: %s/%d vs %s/%d: %s", v.Kind, v.Key, v.First.Client, v.First.Seq, v.Second.Client, v.Second.Seq, v.Detail)
}
