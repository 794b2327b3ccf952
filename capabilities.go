package setnxlock

import "sync/atomic"

// A capability is an optional feature of the server, a proxy in front of
// it or the ACL user, which a Locker uses while it is allowed and gives up
// for good once it is refused. Correctness never depends on one: each only
// saves round trips or wakes waiters sooner.
type capability int

const (
	capScripts       capability = iota // EVALSHA/EVAL: the scripted path (scripts.go)
	capSetNXPX                         // SET key value NX PX: SETNX and its safety net in one command
	capSetGet                          // SET key value NX PX GET (Redis 7.0): an unqueued attempt's first step in one command (setget.go)
	capPubSub                          // PUBLISH on release and SUBSCRIBE while waiting: wake-ups (wakeup.go)
	capQueue                           // the queue of waiters and the handoff channel (protocol.go, handoff.go)
	capReleaseMarker                   // the key's marker: ForceRelease's trace, bare values' scripted releases (releasedKey, H5)
	capabilityCount
)

// capabilities is what a Locker may still use. Each starts allowed, unless
// an option turns it off, and is narrowed in one function, narrow, when a
// refusal arrives.
type capabilities struct {
	off          [capabilityCount]atomic.Bool
	transactions atomic.Bool // the server accepted MULTI once (checkTransactions)
}

// allows reports whether the Locker may still use x.
func (c *capabilities) allows(x capability) bool { return !c.off[x].Load() }

// narrow switches x off for good when err is a refusal for good (refused:
// "not allowed", "unknown command"), and reports whether it did. A refused
// command did not run, so the caller may take the way without x at once.
// Transient errors (MISCONF, OOM, LOADING, a lost reply) never switch
// anything off.
func (c *capabilities) narrow(x capability, err error) bool {
	if !refused(err) {
		return false
	}
	c.off[x].Store(true)
	return true
}

// disable switches x off from the start, for an option that asks so.
func (c *capabilities) disable(x capability) { c.off[x].Store(true) }
