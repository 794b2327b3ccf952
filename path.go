package setnxlock

import (
	"context"
	"fmt"
)

// A path is one way of sending an attempt's first step and a release,
// with its transport of the queue protocol (protocol.go): the scripts, one
// round trip each (scriptPath, scripts.go), or the commands (commandPath,
// commands.go), which use SET NX PX where the server knows it and the
// classic SETNX elsewhere. Both do the same steps with the same meaning;
// only the commands and the round trips differ. The takeover of an expired
// lease is takeover.lua on the scripted path (one round trip) and the
// watched transaction on the command path (deadlock.go); Refresh
// (refresh.go) is a watched transaction on every path.
type path interface {
	// claim is an unqueued attempt's first step: SETNX key <ours> with its
	// safety net (H6) and, with fencing, the token; when the key exists,
	// the holder's value.
	claim(ctx context.Context, key string, ours stamp) (claimOutcome, error)
	// release deletes the lock's key only if it holds a value of the
	// lock's (H3), and announces the release; it reports whether the key
	// was ours.
	release(ctx context.Context, k *Lock) (bool, error)
	// takeOver writes ours over expiredValue, a lease judged over, only
	// while the key still holds it (H1, H2), with its safety net (H6),
	// the fencing token and, for a queued wait, its leaving the queue; it
	// reports whether it wrote (deadlock.go).
	takeOver(ctx context.Context, key, expiredValue string, ours stamp) (takeover, error)
	// queue is the path's transport of the queue protocol (protocol.go).
	queue() queueTransport
}

// claimOutcome is what an attempt's first step learned: whether it created the
// key (and then its fencing token), or else the value found there.
type claimOutcome struct {
	created      bool
	fencingToken int64
	current      string
	found        bool
	dequeued     bool   // a queued attempt's win took its entry off the queue with it
	unqueued     bool   // a queued attempt could not queue on this key: its wait stops queueing
	ahead        bool   // a queued attempt found a value of its wait stating an end no earlier than its own: nothing written (H10)
	wrote        *stamp // the lease the claim wrote instead of the attempt's: a restamp, or an unqueued write of a queued wait (claimOn)
}

// onPath runs op on the scripted path while scripts are allowed, else on
// the command path. A refusal of the scripts narrows the Locker's
// capabilities for good and runs op again on the command path at once: a
// refused command did not run. This is the one place the Locker falls back
// from its scripts.
func (l *Locker) onPath(op func(p path) error) error {
	if l.caps.allows(capScripts) {
		err := op(scriptPath{l})
		if !l.caps.narrow(capScripts, err) {
			return err
		}
	}
	return op(commandPath{l})
}

// claimKey is an attempt's first step, on the Locker's path (claimOn). A
// queued claim that finds a value of its wait stating an end no earlier
// than its own writes nothing (H10) and claims again at once, with a value
// stating a millisecond past that end (restamp); found so twice, the key
// keeps moving, and the attempt looks again.
func (l *Locker) claimKey(ctx context.Context, key string, ours stamp) (c claimOutcome, err error) {
	var restamped *stamp
	for range 2 {
		err = l.onPath(func(p path) error {
			c, err = l.claimOn(ctx, p, key, ours)
			return err
		})
		if err != nil || !c.ahead {
			if c.wrote == nil {
				c.wrote = restamped
			}
			return c, err
		}
		if ours, err = restamp(c.current, ours); err != nil {
			return claimOutcome{}, fmt.Errorf("setnxlock: key %q: %w", key, err) // H7: the key is left untouched
		}
		wrote := ours // a copy: &ours would move ours to the heap on every claim
		restamped = &wrote
	}
	return claimOutcome{}, nil
}

// releaseOn is a release of k on path p: handed on by the path's queue
// transport where the Locker hands over, else deleted.
func (l *Locker) releaseOn(ctx context.Context, p path, k *Lock) (bool, error) {
	if l.handsOver() {
		return p.queue().handOn(ctx, k)
	}
	return p.release(ctx, k)
}
