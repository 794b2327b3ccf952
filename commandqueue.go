package setnxlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The transport of the queue protocol (protocol.go) with commands alone,
// for Lockers without scripts (WithoutScripts, WithClassicCommands, or
// scripts refused): each write of a step is a transaction watched on the
// key and the queue (watchedWrite, transaction.go), so that it applies
// only to what was read; a handoff's PUBLISH goes last in its MULTI/EXEC.
// A queued attempt is SET NX, then GET with its ZADD NX in one pipeline; a
// release is WATCH with GET and the head of the queue, then MULTI/EXEC.
// The ZADD is not atomic with the read of the last score, so waiters
// arriving within a round trip of each other may share a score, and are
// served in either order.
type commandQueue struct{ l *Locker }

// enqueueOrClaim is SET NX (or SETNX), and when the key exists, its value
// and the entry's place in the queue in one round trip; a value carrying
// the entry's token is claimed.
func (q commandQueue) enqueueOrClaim(ctx context.Context, key string, ours stamp, entry *queueEntry) (claimOutcome, error) {
	l := q.l
	created, _, err := l.setnx(ctx, key, ours)
	if err != nil {
		return claimOutcome{}, fmt.Errorf("setnxlock: SETNX %q: %w", key, err)
	}
	if created {
		return claimOutcome{created: true}, nil // grantWin takes the entry off the queue
	}
	waiters := q.l.waitersOf(key)
	var get *redis.StringCmd
	var place *redis.FloatCmd
	var last *redis.ZSliceCmd
	var ttl *redis.DurationCmd
	_, _ = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		get = pipe.Get(ctx, key)
		place = pipe.ZScore(ctx, waiters, entry.member)
		last = pipe.ZRangeWithScores(ctx, waiters, -1, -1)
		ttl = pipe.PTTL(ctx, waiters)
		return nil
	})
	current, found, err := stringReply(get)
	switch {
	case err != nil:
		return claimOutcome{}, fmt.Errorf("setnxlock: GET %q: %w", key, err)
	case !found:
		return claimOutcome{}, nil // released between SET NX and GET: look again
	case entry.carries(current) && !entry.claimable(current, ours):
		return claimOutcome{current: current, found: true, ahead: true}, nil // H10: nothing to move forward
	case entry.carries(current):
		// Handed to us, or written by an attempt of ours whose reply was
		// lost: claim it with a lease of our own clock (H4, H6).
		claimed, err := q.claimHanded(ctx, key, ours, entry)
		if err != nil || !claimed {
			return claimOutcome{}, err // !claimed: it changed under us, look again
		}
		return claimOutcome{created: true, dequeued: true}, nil
	}
	held := claimOutcome{current: current, found: true}
	if err := q.enqueue(ctx, entry, ours, place, last, ttl); err != nil {
		if l.caps.narrow(capQueue, err) || isWrongType(err) {
			held.unqueued = true // refused, or not a sorted set: this wait stops queueing
		}
	}
	return held, nil // a transient failure: it queues at its next attempt
}

// enqueue gives entry its place in the queue, after everyone already in
// line, if the read of the queue (its place, the last entry, the queue's
// lifetime) found it has none; a re-polling waiter keeps its place.
func (q commandQueue) enqueue(ctx context.Context, entry *queueEntry, ours stamp, place *redis.FloatCmd, last *redis.ZSliceCmd, ttl *redis.DurationCmd) error {
	l := q.l
	waiters := q.l.waitersOf(entry.key)
	net := l.safetyNet(ours.length())
	err := place.Err()
	if err == nil {
		// Queued already. The queue lives as long as the longest safety
		// net of its waiters; it is refreshed only once it has run down to
		// half of ours, since every write to it aborts the watch of a
		// release in progress (handOnce).
		if d, err := ttl.Result(); err == nil && d < net/2 {
			return l.client.PExpire(ctx, waiters, net).Err()
		}
		return nil
	}
	if !errors.Is(err, redis.Nil) {
		return err
	}
	zs, err := last.Result()
	if err != nil {
		return err
	}
	score := float64(l.cfg.clock.Now().UnixMicro())
	if len(zs) == 1 {
		score = max(score, zs[0].Score+1)
	}
	cmds, err := l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.ZAddNX(ctx, waiters, redis.Z{Score: score, Member: entry.member})
		if d, err := ttl.Result(); err != nil || d < net {
			pipe.PExpire(ctx, waiters, net)
		}
		return nil
	})
	if err != nil {
		return cmds[0].Err() // the ZADD's own, if it failed
	}
	return nil
}

// claimHanded writes our lease over a value that carries entry's token and
// states an earlier end than ours (claimable, H10), and takes the entry off
// the queue, in one watched transaction. SET then PEXPIRE, not SET PX:
// classic servers take it too.
func (q commandQueue) claimHanded(ctx context.Context, key string, ours stamp, entry *queueEntry) (bool, error) {
	claimed, _, err := q.claim(ctx, key, ours, entry)
	return claimed, err
}

// claim is claimHanded, reporting the value it last found when it wrote
// nothing.
func (q commandQueue) claim(ctx context.Context, key string, ours stamp, entry *queueEntry) (bool, string, error) {
	net := q.l.safetyNet(ours.length())
	var found string
	claimable := func(current string) bool {
		found = current
		return entry.claimable(current, ours)
	}
	claimed, err := q.l.compareAndWrite(ctx, key, claimable, func(pipe redis.Pipeliner) {
		pipe.Set(ctx, key, ours.value, 0)
		pipe.PExpire(ctx, key, net)
		pipe.ZRem(ctx, q.l.waitersOf(key), entry.member)
	})
	if claimed {
		found = ""
	}
	return claimed, found, err
}

// handOn hands k's key on (handOnOwned). A refused handoff stops the
// Locker handing over and queueing, and the key is deleted instead: a
// refused transaction did not run.
func (q commandQueue) handOn(ctx context.Context, k *Lock) (bool, error) {
	deleted, err := q.handOnOwned(ctx, k.key, k.owns, q.l.cfg.starvation)
	if !q.l.caps.narrow(capQueue, err) {
		return deleted, err
	}
	return q.l.deleteOwned(ctx, k.key, k.owns)
}

// leave is ZREM of the entry, then the key handed on (or deleted) if it
// carries the entry's token; a key left free wakes the next in line, as
// leave.lua does. When the ZREM fails (refused, X2) the entry may still
// be first in line: a value carrying its token is deleted, not handed on.
func (q commandQueue) leave(ctx context.Context, entry *queueEntry) error {
	l := q.l
	if err := l.client.ZRem(ctx, l.waitersOf(entry.key), entry.member).Err(); err != nil {
		_, deleteErr := l.deleteOwned(ctx, entry.key, entry.carries)
		return errors.Join(fmt.Errorf("setnxlock: leave the queue of %q: %w", entry.key, err), deleteErr)
	}
	if l.handsOver() {
		handed, err := q.handOnOwned(ctx, entry.key, entry.carries, 0)
		if err == nil && !handed {
			if _, found, err := l.get(ctx, entry.key); err == nil && !found {
				q.wakeHead(ctx, entry.key)
			}
		}
		if !l.caps.narrow(capQueue, err) {
			return err
		}
	}
	_, err := l.deleteOwned(ctx, entry.key, entry.carries)
	return err
}
