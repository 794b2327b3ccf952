package setnxlock

import (
	"context"
	_ "embed" // the Lua scripts, one job per file
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The scripted fast path: where the server runs Lua, an attempt's first
// step (SETNX, the safety net, the fencing token, or the GET of the
// holder's value) and a release (compare-and-delete and the wake-up, or the
// handoff to the next queued waiter) each take one round trip. Scripts do
// the very same steps as the command path, atomically; correctness never
// depends on them. A Locker whose server refuses scripts (ACL without
// @scripting, a proxy without EVAL) falls back to the commands for good.
// Each script's file states its KEYS, ARGV and replies.

var (
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/value.lua
	valueLua string
	//go:embed lua/queued.lua
	queuedLua string
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/protocol.lua
	protocolLua string
	//go:embed lua/handon.lua
	handOnLua string
	//go:embed lua/release_alone.lua
	releaseAloneLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/leave.lua
	leaveLua string
)

var (
	acquireScript     = redis.NewScript(acquireLua)
	acquireScriptCall = callOf(acquireScript, acquireLua) // how unqueuedClaim sends it (scriptcall.go)
	queuedScript      = redis.NewScript(valueLua + queuedLua)
	claimScript       = redis.NewScript(valueLua + claimLua)
	releaseScript     = redis.NewScript(releaseSource)
	leaveScript       = redis.NewScript(valueLua + protocolLua + handOnLua + leaveLua)
)

// releaseSource is release.lua with the parts it takes from the others.
var releaseSource = valueLua + ownedLua + releaseAloneLua + protocolLua + handOnLua + releaseLua

// releaseCall is how runRelease sends releaseScript (scriptcall.go).
var releaseCall = callOf(releaseScript, releaseSource)

// scriptPath is the path of the scripts: an attempt's first step and a
// release are one round trip each.
type scriptPath struct{ l *Locker }

// queue is the scripted transport of the queue protocol (scriptqueue.go).
func (p scriptPath) queue() queueTransport { return scriptQueue(p) }

// claim sends SET NX PX GET where the server has it (setget.go), else
// runs acquire.lua.
func (p scriptPath) claim(ctx context.Context, key string, ours stamp) (claimOutcome, error) {
	if c, sent, err := p.l.claimBySetGet(ctx, key, ours); sent {
		return c, err
	}
	c, err := p.unqueuedClaim(ctx, key, ours)
	return c, failedOn(key, err)
}

// failedOn says which key an acquire script failed on.
func failedOn(key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("setnxlock: acquire script on %q: %w", key, err)
}

// unqueuedClaim is an unqueued attempt's first step: acquire.lua.
func (p scriptPath) unqueuedClaim(ctx context.Context, key string, ours stamp) (claimOutcome, error) {
	numKeys := 1 // the key, and its fence counter
	if p.l.cfg.fencing {
		numKeys++
	}
	args := append(acquireScriptCall.args(numKeys, numKeys+2), key) // one allocation
	if p.l.cfg.fencing {
		args = append(args, p.l.fenceCounter(key))
	}
	args = append(args, ours.value, p.l.netArg(ours.length()))
	reply, err := acquireScriptCall.run(ctx, p.l.client, args).Slice()
	if err != nil {
		return claimOutcome{}, err
	}
	switch outcome := scriptOutcome(reply); {
	case outcome == 1 && len(reply) == 2:
		token, _ := reply[1].(int64)
		return claimOutcome{created: true, fencingToken: token}, nil
	case outcome == 0 && len(reply) == 2:
		current, _ := reply[1].(string)
		return claimOutcome{current: current, found: true}, nil
	case outcome == 2:
		return claimOutcome{}, ErrNotLockValue
	case outcome == 3:
		return claimOutcome{}, errFenceNotCounter(p.l.fenceCounter(key))
	}
	return claimOutcome{}, errors.New("setnxlock: unexpected reply from the acquire script")
}

// scriptOutcome is the first element of a script's reply, or -1.
func scriptOutcome(reply []any) int64 {
	if len(reply) == 0 {
		return -1
	}
	outcome, ok := reply[0].(int64)
	if !ok {
		return -1
	}
	return outcome
}

// The outcomes of the release script (release.lua).
const (
	releaseNotOurs  = 0
	releaseDeleted  = 1
	releaseHanded   = 2
	releaseRepeated = 3
)

// release deletes the lock's key if it holds a value of the lock's, and
// wakes the key's waiters, in one script (releaseWith).
func (p scriptPath) release(ctx context.Context, k *Lock) (bool, error) {
	return p.releaseWith(ctx, k, false)
}

// releaseWith runs release.lua, handing the key to the next queued waiter
// if handing. It reports whether the key was ours, now or in an earlier
// run of this release whose reply was lost.
//
// The script names the keys it touches, and an ACL user refused any of
// them is refused the whole script. So when it is refused with the
// optional keys (the release marker, the queue), it runs again without
// one, then the other, and a key is switched off for good only when the
// run without it succeeded: a run that failed otherwise (a lost reply)
// proves nothing. A refusal with no optional key left is the caller's to
// handle (onPath: scripts off).
func (p scriptPath) releaseWith(ctx context.Context, k *Lock, handing bool) (bool, error) {
	l := p.l
	marking := k.token == "" && l.caps.allows(capReleaseMarker) // token values need no marker (forcetrace.go)
	deleted, denied := l.runRelease(ctx, k, marking, handing)
	if !refused(denied) || !marking && !handing {
		return deleted, denied
	}
	type without struct {
		marking, handing bool
		blamed           []capability // switched off if the run without them succeeds
	}
	var runs []without
	if marking && handing {
		runs = append(runs, without{true, false, []capability{capQueue}}, without{false, true, []capability{capReleaseMarker}})
	}
	last := without{}
	if marking {
		last.blamed = append(last.blamed, capReleaseMarker)
	}
	if handing {
		last.blamed = append(last.blamed, capQueue)
	}
	for _, run := range append(runs, last) {
		deleted, err := l.runRelease(ctx, k, run.marking, run.handing)
		if err == nil {
			for _, x := range run.blamed {
				l.caps.narrow(x, denied)
			}
		}
		if !refused(err) {
			return deleted, err
		}
	}
	return false, denied
}

// runRelease runs release.lua once, with the release marker and the
// handoff as asked.
func (l *Locker) runRelease(ctx context.Context, k *Lock, marking, handing bool) (bool, error) {
	now := l.cfg.clock.Now()
	channel, waiters, hand, markFor := "", "", any(""), int64(0)
	line, permit := l.permitLineOf(k.key)
	switch pubSub := l.caps.allows(capPubSub); {
	case pubSub && handing:
		channel, waiters = wakeChannelAndWaiters(k.key)
		if permit {
			waiters = line.queue // a permit of a semaphore's one queue (waitersOf)
		}
	case pubSub:
		channel = WakeChannel(k.key)
	case handing:
		waiters = l.waitersOf(k.key)
	}
	if marking {
		markFor = max(k.lease.ends().Sub(now).Milliseconds(), 0) // the rest of the lease: a resend later finds it over anyway
	}
	numKeys := 1 // the key, its marker, its waiters, a permit's count
	if markFor > 0 {
		numKeys++
	}
	index := any("")
	if handing {
		numKeys++
		hand = l.args.starvation
		if permit {
			numKeys++
			index = line.index // handed on only while below the recorded count (protocol.go)
		}
	}
	args := releaseCall.args(numKeys, numKeys+12+len(k.maybe)) // one allocation
	args = append(args, k.key)
	if markFor > 0 {
		args = append(args, releasedKey(k.key))
	}
	if handing {
		args = append(args, waiters)
		if permit {
			args = append(args, line.count)
		}
	}
	args = l.appendProtocolArgs(args, now)
	args = append(args, channel, now.UnixMicro(), hand, markFor, k.token, index)
	if k.token == "" {
		// This run's own id: what a resend recognises its work by, since a
		// bare value may be written again, identically, by the next holder.
		args = append(args, newToken(), k.value)
		for _, v := range k.maybe {
			args = append(args, v)
		}
	}
	reply, err := releaseCall.run(ctx, l.client, args).Slice()
	if err != nil {
		return false, err
	}
	if len(reply) == 2 {
		failed, _ := reply[1].(string)
		l.caps.narrow(capQueue, scriptErr(failed)) // the ACL user may not hand over: the queue, the write or the channel
	}
	switch scriptOutcome(reply) {
	case releaseDeleted, releaseHanded, releaseRepeated:
		return true, nil
	case releaseNotOurs:
		return false, nil
	}
	return false, errors.New("setnxlock: unexpected reply from the release script")
}
