package chaos

import (
	"github.com/setnxlock/setnxlock/internal/faultproxy"
)

// The kinds of fault a run injects and counts: the harness's own, those a
// client injects into itself, and (Faults.Network) the proxies'.

// Faults counts what the harness injected, by kind.
type Faults struct {
	Kinds   map[string]int // every kind but the network's
	Network faultproxy.Stats
}

// The kinds of fault the harness counts (besides the proxy's and those a
// client injects into itself: cancel, handoff-cancel, close).
const (
	FaultKill        = "kill"         // a process client killed inside its critical section
	FaultPause       = "pause"        // a process client stopped past its lease inside its critical section
	FaultCrash       = "crash"        // a goroutine client abandoned its locks as if crashed
	FaultStall       = "stall"        // a goroutine client stalled past its lease inside its critical section
	FaultGrantPause  = "grant-pause"  // a holder stopped or stalled right after Acquire returned
	FaultReleaseKill = "release-kill" // a process client killed while it released
	FaultWaiterKill  = "waiter-kill"  // a process client killed while one of its Acquire calls waited
	FaultRestart     = "restart"      // a redis-server killed and restarted
	FaultPubSubKill  = "pubsub-kill"  // CLIENT KILL TYPE pubsub
	FaultScriptFlush = "script-flush" // SCRIPT FLUSH
	FaultACLRevoke   = "acl-revoke"   // pub/sub or scripting revoked from the clients' user for a while
	FaultOOM         = "oom"          // 30ms with maxmemory 1: writes that need memory fail with OOM
	FaultQueuedLost  = "queued-lost"  // a queued attempt's reply lost on purpose (also among the proxies' lost replies)
	FaultQueuedHeld  = "queued-held"  // a queued attempt held back past the read timeout on purpose (also among the proxies' held requests)
	FaultPartition   = "partition"    // a client inside a critical section cut off from Redis, its proxy frozen for a while

	// The faults a client injects into itself and reports (loop.go,
	// waiting.go, protocol.go).
	FaultCancel        = "cancel"         // an Acquire's context ended at a random moment
	FaultHandoffCancel = "handoff-cancel" // an Acquire cancelled within 3ms of a release of its key
	FaultClose         = "close"          // Locker.Close while one of the client's Acquire calls waited
)

// Total is the number of faults of every kind.
func (f Faults) Total() int {
	n := f.Network.Total()
	for _, c := range f.Kinds {
		n += c
	}
	return n
}
