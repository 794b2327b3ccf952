package setnxlock

import (
	"context"
	"errors"
)

// The scripted transport of the queue protocol (protocol.go): each step
// is one script, one round trip. The scripts take the protocol's
// encodings as arguments (lua/protocol.lua).
type scriptQueue struct{ l *Locker }

// The outcomes of the queued attempt's script (queued.lua).
const (
	queuedHeld    = 0
	queuedWon     = 1
	queuedForeign = 2
	queuedRefused = 3
	queuedAhead   = 4
)

// enqueueOrClaim runs queued.lua: the SETNX, or the claim of a key that
// carries the entry's token, or a place in the queue.
func (q scriptQueue) enqueueOrClaim(ctx context.Context, key string, ours stamp, entry *queueEntry) (claimOutcome, error) {
	l := q.l
	keys := []string{key, l.waitersOf(key)}
	now := l.cfg.clock.Now().UnixMicro() // our arrival, if we are new to the queue
	reply, err := queuedScript.Run(ctx, l.client, keys, ours.value, l.safetyNet(ours.length()).Milliseconds(), entry.member, entry.token, now,
		statedEnd(ours).UnixMilli()).Slice()
	if err != nil {
		return claimOutcome{}, failedOn(key, err)
	}
	switch outcome := scriptOutcome(reply); {
	case outcome == queuedWon && len(reply) == 2:
		failed, _ := reply[1].(string)
		l.caps.narrow(capQueue, scriptErr(failed)) // the ACL user may not take entries off the queue
		return claimOutcome{created: true, dequeued: failed == ""}, nil
	case outcome == queuedRefused && len(reply) == 3:
		failed, _ := reply[2].(string)
		l.caps.narrow(capQueue, scriptErr(failed)) // refused: no wait of the Locker queues from now on
		current, _ := reply[1].(string)
		return claimOutcome{current: current, found: true, unqueued: true}, nil // this wait stops queueing on this key
	case outcome == queuedHeld && len(reply) == 2:
		current, _ := reply[1].(string)
		return claimOutcome{current: current, found: true}, nil
	case outcome == queuedAhead && len(reply) == 2:
		current, _ := reply[1].(string)
		return claimOutcome{current: current, found: true, ahead: true}, nil // nothing written (H10)
	case outcome == queuedForeign:
		return claimOutcome{}, failedOn(key, ErrNotLockValue)
	}
	return claimOutcome{}, errors.New("setnxlock: unexpected reply from the queued attempt's script")
}

// claim runs claim.lua: the claim of a handoff heard, and nothing else.
func (q scriptQueue) claim(ctx context.Context, key string, ours stamp, entry *queueEntry) (bool, string, error) {
	l := q.l
	reply, err := claimScript.Run(ctx, l.client, []string{key, l.waitersOf(key)}, ours.value, l.safetyNet(ours.length()).Milliseconds(),
		entry.member, entry.token, statedEnd(ours).UnixMilli()).Slice()
	if err != nil {
		return false, "", failedOn(key, err)
	}
	switch outcome := scriptOutcome(reply); {
	case outcome == 1 && len(reply) == 2:
		failed, _ := reply[1].(string)
		l.caps.narrow(capQueue, scriptErr(failed)) // the ACL user may not take entries off the queue
		return true, "", nil
	case outcome == 0 && len(reply) == 2:
		current, _ := reply[1].(string)
		return false, current, nil
	case outcome == 0:
		return false, "", nil
	}
	return false, "", errors.New("setnxlock: unexpected reply from the claim script")
}

// handOn runs release.lua with the key's queue.
func (q scriptQueue) handOn(ctx context.Context, k *Lock) (bool, error) {
	return scriptPath(q).releaseWith(ctx, k, true)
}

// leave runs leave.lua while the Locker queues. Once the queue is refused
// (its key, for this ACL user), the Locker stops queueing and the commands
// leave instead.
func (q scriptQueue) leave(ctx context.Context, entry *queueEntry) error {
	l := q.l
	if l.caps.allows(capQueue) {
		channel := ""
		if l.caps.allows(capPubSub) {
			channel = WakeChannel(entry.key)
		}
		now := l.cfg.clock.Now()
		keys, index := []string{entry.key, waitersKey(entry.key)}, any("")
		if line, ok := l.permitLineOf(entry.key); ok {
			// handed on only while below the recorded count (protocol.go)
			keys, index = append(keys[:1], line.queue, line.count), line.index
		}
		args := append(l.appendProtocolArgs(make([]any, 0, 9), now), entry.member, entry.token, channel, now.UnixMicro(), index)
		err := leaveScript.Run(ctx, l.client, keys, args...).Err()
		if !l.caps.narrow(capQueue, err) {
			return err
		}
	}
	return commandQueue(q).leave(ctx, entry)
}
