package chaos

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// The faults of the waiting paths that the harness injects from outside
// the clients: pub/sub connections cut, scripts flushed, ACL permissions
// revoked and restored, waiting processes killed, queued attempts' replies
// lost or the attempts held back. Each draws from a seeded stream of its
// own.

// startServerFaults starts the goroutines that inject them.
func (h *harness) startServerFaults() {
	// The rules are called under each proxy's lock, one request at a time
	// per proxy; several proxies (a Cluster's nodes, the partition mode's
	// clients) share a rule, so its stream is drawn under a lock of its own.
	if h.cfg.QueuedLoseRate > 0 {
		rng := lockedStream(h.cfg.Seed, "queued-lost")
		h.servers.loseRepliesTo(func(args []string) bool {
			if queuedAttempt(args) && rng.float64() < h.cfg.QueuedLoseRate {
				h.fault(FaultQueuedLost, "")
				return true
			}
			return false
		})
	}
	if h.cfg.QueuedHoldRate > 0 && h.cfg.Network.MaxHold > 0 {
		rng := lockedStream(h.cfg.Seed, "queued-held")
		minHold, maxHold := h.cfg.Network.MinHold, h.cfg.Network.MaxHold
		h.servers.holdRequestsTo(func(args []string) time.Duration {
			// A waiter's poll held past its read timeout lands after its
			// later requests: its retry, its win, its claim (H10).
			if queuedAttempt(args) && rng.float64() < h.cfg.QueuedHoldRate {
				h.fault(FaultQueuedHeld, "")
				return minHold + time.Duration(rng.float64()*float64(maxHold-minHold))
			}
			return 0
		})
	}
	h.every(h.cfg.PubSubKillEvery, "pubsub-kills", func(*rand.Rand) {
		h.servers.everyNode("client", "kill", "type", "pubsub")
		h.fault(FaultPubSubKill, "")
	})
	h.every(h.cfg.ScriptFlushEvery, "script-flushes", func(*rand.Rand) {
		h.servers.everyNode("script", "flush")
		h.fault(FaultScriptFlush, "")
	})
	h.every(h.cfg.WaiterKillEvery, "waiter-kills", h.killAWaiter)
	h.every(h.cfg.OOMEvery, "oom", func(*rand.Rand) {
		// Writes that need memory (SET, SETNX, RPUSH) fail with OOM; those
		// that free it (DEL, LPOP) and PUBLISH still run.
		h.fault(FaultOOM, "")
		h.servers.everyNode("config", "set", "maxmemory", "1")
		_ = sleepOrStop(30*time.Millisecond, h.stop)
		h.servers.everyNode("config", "set", "maxmemory", "0")
	})
}

// every runs inject at intervals drawn from an exponential distribution
// of the given mean until the run stops; a mean of 0 injects nothing.
func (h *harness) every(mean time.Duration, stream string, inject func(*rand.Rand)) {
	if mean <= 0 {
		return
	}
	rng := streamFor(h.cfg.Seed, stream)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for sleepOrStop(time.Duration(rng.ExpFloat64()*float64(mean)), h.stop) == nil {
			inject(rng)
		}
	}()
}

// lockedRand is a seeded stream that several goroutines draw from.
type lockedRand struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func lockedStream(seed uint64, name string) *lockedRand {
	return &lockedRand{rng: streamFor(seed, name)}
}

func (r *lockedRand) float64() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.Float64()
}

// queuedAttempt recognises a queued attempt on the wire: the library's
// queued.lua (EVAL or EVALSHA) names the lock key and its queue, and
// passes our value, the safety net, the queue entry "<Locker id>:<token>",
// the entry's token (which the value carries), our clock and our value's
// end (claimsEntry). The release and leave scripts name the queue too, but
// pass other arguments.
func queuedAttempt(args []string) bool {
	name := strings.ToLower(args[0])
	if (name != "evalsha" && name != "eval") || len(args) != 11 || args[2] != "2" {
		return false
	}
	return claimsEntry(args)
}

// killAWaiter kills a client process one of whose Acquire calls has been
// waiting for at least a few milliseconds, which on a contended key means
// it is queued.
func (h *harness) killAWaiter(rng *rand.Rand) {
	waiters := h.rec.waiting(time.Now().Add(-5 * time.Millisecond))
	h.mu.Lock()
	defer h.mu.Unlock()
	waiters = slices.DeleteFunc(waiters, func(name string) bool { return h.procs[name] == nil })
	if len(waiters) == 0 || h.stopping {
		return
	}
	name := waiters[rng.IntN(len(waiters))]
	h.procs[name].kill()
	h.fault(FaultWaiterKill, name)
}

// The ACL revocations: pub/sub is taken from the clients' user for the
// tenth of the run's acquisitions from 55%, scripting for the tenth from
// 75%. A Locker that is refused a feature stops using it for good; the
// clients started later (after kills and crashes) find it allowed again.
var revocations = [2]struct {
	from     float64
	category string
}{{0.55, "@pubsub"}, {0.75, "@scripting"}}

// revokeOnSchedule revokes or restores a permission when the count of
// acquisitions crosses its window.
func (h *harness) revokeOnSchedule(n int) {
	for i, r := range revocations {
		begin := int(r.from * float64(h.cfg.Acquisitions))
		end := begin + h.cfg.Acquisitions/10
		h.mu.Lock()
		act := ""
		switch {
		case n >= begin && n < end && !h.revoked[i]:
			h.revoked[i], act = true, "-"
		case n >= end && h.revoked[i]:
			h.revoked[i], act = false, "+"
		}
		h.mu.Unlock()
		if act != "" {
			h.setACL(act + r.category)
			if act == "-" {
				h.fault(FaultACLRevoke, r.category)
			}
		}
	}
}

// restoreACL gives the clients' user back every permission.
func (h *harness) restoreACL() {
	for _, r := range revocations {
		h.setACL("+" + r.category)
	}
}

// setACL changes the clients' user and saves the ACL file, so that a
// restarted server keeps the change.
func (h *harness) setACL(rule string) {
	h.servers.everyNode("acl", "setuser", UserChaos, rule)
	h.servers.everyNode("acl", "save")
}
