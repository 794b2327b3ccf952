package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The queue and the handoff with commands alone, for Lockers without
// scripts (WithoutScripts, WithClassicCommands, or scripts refused): the
// steps of queued.lua, release.lua's handOn and leave.lua, each write in a
// transaction watched on the key and the queue, so that it applies only to
// what was read. The invariants are the scripted path's (handoff.go,
// queue.go):
//
//   - Write, then announce: the handoff's ZREM, its provisional value and
//     its PUBLISH are one MULTI/EXEC, the PUBLISH last; a write that fails
//     aborts the announcement with it.
//   - One owner per value: a value written for a wait carries its entry's
//     token; only that wait claims it, by a watched SET that also takes the
//     entry off the queue, and only to move its lease forward (H10,
//     queue.go).
//   - Heard means claimed: a handed value states an end claimWindow after
//     the release and expires on the server then; the waiter claims it with
//     a lease of its own clock's. A handoff nobody heard (PUBLISH counted no
//     receiver) is handed on at once, as leave.lua would.
//   - Every way out of the queue removes the entry: a claim and a takeover
//     in their transactions, a SET NX win right after (won), a leave first.
//
// The differences are in round trips and in one order: a queued attempt is
// SET NX, then GET with its ZADD NX in one pipeline; a release is WATCH
// with GET and the head of the queue, then MULTI/EXEC. The queue's scores
// are the waiters' clocks in µs (ZADD NX keeps a re-polling waiter's
// place), so with clocks apart two waiters arriving within the skew of
// each other may be served in either order; queued.lua, which reads the
// last score first, orders them as they arrived.

// maxHandOns bounds how many entries one release or leave hands the key
// past (entries nobody heard), as handOn's loop ends with the queue.
const maxHandOns = 16

// queuedClaim is a queued attempt's first step on the commands: SET NX
// (or SETNX), and when the key exists, its value and the entry's place in
// the queue in one round trip; a value carrying the entry's token is
// claimed.
func (p commandPath) queuedClaim(ctx context.Context, key string, ours stamp, entry *queueEntry) (claimOutcome, error) {
	l := p.l
	created, _, err := l.setnx(ctx, key, ours)
	if err != nil {
		return claimOutcome{}, fmt.Errorf("setnxlock: SETNX %q: %w", key, err)
	}
	if created {
		return claimOutcome{created: true}, nil // grantWin takes the entry off the queue
	}
	waiters := waitersKey(key)
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
		// lost: claim it with a lease of our own clock (H4, H6), under the
		// watch only while it is still claimable (H10, queue.go).
		claimed, err := l.claimHanded(ctx, key, ours, entry)
		if err != nil || !claimed {
			return claimOutcome{}, err // !claimed: it changed under us, look again
		}
		return claimOutcome{created: true, dequeued: true}, nil
	}
	held := claimOutcome{current: current, found: true}
	if err := l.enqueue(ctx, entry, ours, place, last, ttl); err != nil {
		if l.caps.narrow(capQueue, err) || isWrongType(err) {
			held.unqueued = true // refused, or not a sorted set: this wait stops queueing
		}
	}
	return held, nil // a transient failure: it queues at its next attempt
}

// enqueue gives entry its place in the queue, after everyone already in
// line, if the read of the queue (its place, the last entry, the queue's
// lifetime) found it has none; a re-polling waiter keeps its place. The
// read and the ZADD are two round trips: waiters arriving between them may
// share a score, and are served in either order.
func (l *Locker) enqueue(ctx context.Context, entry *queueEntry, ours stamp, place *redis.FloatCmd, last *redis.ZSliceCmd, ttl *redis.DurationCmd) error {
	waiters := waitersKey(entry.key)
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
func (l *Locker) claimHanded(ctx context.Context, key string, ours stamp, entry *queueEntry) (bool, error) {
	net := l.safetyNet(ours.length())
	claimable := func(current string) bool { return entry.claimable(current, ours) }
	return l.compareAndWrite(ctx, key, claimable, func(pipe redis.Pipeliner) {
		pipe.Set(ctx, key, ours.value, 0)
		pipe.PExpire(ctx, key, net)
		pipe.ZRem(ctx, waitersKey(key), entry.member)
	})
}

// headOf is a queue's first entry, as read in a release's transaction.
type headOf struct {
	member string
	locker string // the entry's Locker id
	token  string
	since  time.Time // its arrival, by its clock
}

// handOnOwned is the release of key on the commands: if key holds a value
// owned reports ours, it hands the key to the first waiter that has waited
// barge (0: any), or else deletes it, wakes the key's waiters and, when
// the first waiter has waited less, wakes that one to race for it. A
// handoff nobody heard is handed on while the key still holds exactly the
// provisional value written for it: the waiter may be alive all the same
// (its subscription between two connections) and have claimed the key at
// its next poll, with a lease that carries the same token: a claim never
// writes the value it found, on either transport (queue.go). It reports
// whether the key was ours; once it was, what goes wrong handing on costs
// the claim window, and is not the caller's failure.
func (l *Locker) handOnOwned(ctx context.Context, key string, owned func(string) bool, barge time.Duration) (bool, error) {
	if err := l.checkTransactions(ctx); err != nil {
		return false, err
	}
	ours := false
	for range maxHandOns {
		unheard, written, err := l.handOnce(ctx, key, owned, barge)
		if !ours && errors.Is(err, redis.TxFailedErr) {
			// The queue kept changing under the watch (waiters arriving,
			// leaving): release as if nobody queued, and wake the first in
			// line, rather than fail the release.
			deleted, err := l.deleteOwned(ctx, key, owned)
			if deleted {
				l.wakeHead(ctx, key)
			}
			return deleted, err
		}
		if !ours && (err != nil || !written) {
			return false, err
		}
		ours = true
		if err != nil || !written || unheard == "" {
			return true, nil // handed and heard, freed, or moved on since
		}
		// Nobody heard the handoff: hand the key on from that provisional
		// value, at once and whatever the next waiter's wait.
		owned, barge = func(current string) bool { return current == unheard }, 0
	}
	return true, nil
}

// handOnce is one watched transaction of handOnOwned. It reports whether
// it wrote, and the provisional value it handed the key over with if
// nobody heard that. A wake-up nobody heard takes that entry off the queue
// and wakes the next.
func (l *Locker) handOnce(ctx context.Context, key string, owned func(string) bool, barge time.Duration) (unheard string, written bool, err error) {
	client, _ := l.client.(*redis.Client) // handsOver: a single server
	waiters := waitersKey(key)
	handed, wokenEntry := false, ""
	for range maxTransactionAttempts {
		unheard, written, handed, wokenEntry = "", false, false, ""
		err = client.Watch(ctx, func(tx *redis.Tx) error {
			// WATCH, GET and the head of the queue in one round trip.
			var watch *redis.StatusCmd
			var get *redis.StringCmd
			var head *redis.ZSliceCmd
			_, _ = tx.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				watch = redis.NewStatusCmd(ctx, "watch", key, waiters)
				_ = pipe.Process(ctx, watch)
				get = pipe.Get(ctx, key)
				head = pipe.ZRangeWithScores(ctx, waiters, 0, 0)
				return nil
			})
			if err := watch.Err(); err != nil {
				return errors.Join(err, unwatch(ctx, tx))
			}
			current, found, err := stringReply(get)
			if errors.Is(err, ErrNotLockValue) {
				return unwatch(ctx, tx) // a key of another type is not ours (H7)
			}
			if err != nil || !found || !owned(current) {
				return errors.Join(err, unwatch(ctx, tx))
			}
			h, malformed, err := readHead(head)
			if err != nil {
				return errors.Join(err, unwatch(ctx, tx))
			}
			now := l.cfg.clock.Now()
			handed = h != nil && (barge == 0 || now.Sub(h.since) >= barge) // 0: whatever the clocks
			provisional := ""
			if handed {
				provisional = formatValue(now.Add(claimWindow), h.token)
			}
			var heard *redis.IntCmd
			cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				if handed {
					pipe.ZRem(ctx, waiters, h.member)
					pipe.Set(ctx, key, provisional, 0)
					pipe.PExpire(ctx, key, claimWindow)
					heard = pipe.Publish(ctx, handoffChannel(h.locker), h.token+":"+key) // write, then announce
					return nil
				}
				pipe.Del(ctx, key)
				pipe.Publish(ctx, WakeChannel(key), key)
				if malformed != "" {
					pipe.ZRem(ctx, waiters, malformed) // as handOn drops it
				}
				if h != nil { // wake it to race for the key; it keeps its place
					heard = pipe.Publish(ctx, handoffChannel(h.locker), h.token+":"+key)
				}
				return nil
			})
			if err = withCause(cmds, err); err != nil {
				return err
			}
			written = true
			if h != nil && heard.Val() == 0 {
				unheard, wokenEntry = provisional, h.member
			}
			return nil
		})
		if !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil {
		return "", false, err
	}
	if wokenEntry != "" && !handed {
		// A wake-up nobody heard: that entry's Locker is gone. It leaves
		// the queue and the next in line is woken instead.
		_ = l.client.ZRem(ctx, waiters, wokenEntry).Err()
		l.wakeHead(ctx, key)
	}
	return unheard, written, nil
}

// readHead reads a queue's first entry: nil when the queue is empty or is
// not a sorted set; nil and the entry as malformed when it is not
// "<Locker id>:<token>" (nobody to hand to; the release drops it).
func readHead(cmd *redis.ZSliceCmd) (head *headOf, malformed string, err error) {
	zs, err := cmd.Result()
	if isWrongType(err) {
		return nil, "", nil // not a queue: nobody to hand to
	}
	if err != nil || len(zs) == 0 {
		return nil, "", err
	}
	member, _ := zs[0].Member.(string)
	locker, token, ok := strings.Cut(member, ":")
	if !ok || locker == "" || token == "" || strings.Contains(token, ":") {
		return nil, member, nil
	}
	return &headOf{member: member, locker: locker, token: token, since: time.UnixMicro(int64(zs[0].Score))}, "", nil
}

// wakeHead wakes the first waiter in key's queue, when the key is free and
// nobody else will: after a wake-up nobody heard, or a leave.
func (l *Locker) wakeHead(ctx context.Context, key string) {
	zs, err := l.client.ZRange(ctx, waitersKey(key), 0, 0).Result()
	if err != nil || len(zs) == 0 {
		return
	}
	if locker, token, ok := strings.Cut(zs[0], ":"); ok {
		_ = l.client.Publish(ctx, handoffChannel(locker), token+":"+key).Err()
	}
}
