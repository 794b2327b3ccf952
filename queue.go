package setnxlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// A waiting Acquire's place in its key's queue, on whichever transport
// the Locker's path takes (protocol.go states the protocol).

// leaveTimeout bounds the round trip that takes a waiter off the queue
// after its context ended.
const leaveTimeout = time.Second

// claimOn is an attempt's first step on path p: the queue's
// enqueueOrClaim for an attempt of a queued wait (ours.queuedWait) while
// the Locker queues, else the unqueued claim. A queued attempt refused the
// queue (its queue key, for this ACL user) stops the Locker queueing and
// claims unqueued at once, with a value of its own token (X2): the wait's
// token is the queue's (one owner per value, protocol.go), and a write of
// its own whose reply is lost is recognised by the next attempt (H5).
func (l *Locker) claimOn(ctx context.Context, p path, key string, ours stamp) (claimOutcome, error) {
	if ours.queuedWait != "" && l.queues() {
		c, err := p.queue().enqueueOrClaim(ctx, key, ours, l.queueEntryOf(key, ours.queuedWait))
		if !l.caps.narrow(capQueue, err) {
			return c, err
		}
	}
	if ours.queuedWait == "" {
		return p.claim(ctx, key, ours)
	}
	own := l.newStamp(ours.start, l.cfg.ttl, newToken())
	own.queuedWait = ours.queuedWait // written for the wait, not carrying its token: remembered if lost (pending.go)
	c, err := p.claim(ctx, key, own)
	c.wrote, c.unqueued = &own, true // this wait stops queueing on this key
	return c, err
}

// dequeue takes the entry of the queued wait whose token is queuedWait
// off key's queue, with c: the client, after a win that did not (one
// through the lost-reply memory, or a SETNX outside the queue's steps), or
// a takeover's transaction, in the same step as its write. A failure is
// not remembered as a leave's is (abandon): the wait holds a lease that
// may carry the entry's token, and declining a message for the entry would
// hand that lease on. A handoff to the stale entry later is dropped
// (route), and costs the claim window.
func (l *Locker) dequeue(ctx context.Context, c redis.Cmdable, key, queuedWait string) {
	_ = c.ZRem(ctx, l.waitersOf(key), l.queueEntryOf(key, queuedWait).member).Err()
}

// leaveOnce is one try of the protocol's leave on the Locker's path: it
// takes entry off its key's queue and, if the key carries the entry's
// token, hands the key on (or deletes it). The caller's context may have
// ended, so it runs on its own short deadline. A leave that fails is
// remembered, so that a handoff to the entry is declined (handoff.go).
func (l *Locker) leaveOnce(ctx context.Context, entry *queueEntry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	err := l.onPath(func(p path) error { return p.queue().leave(ctx, entry) })
	if err != nil {
		now := l.cfg.clock.Now()
		l.handoff.abandon(entry, now, now.Add(l.safetyNet(l.cfg.ttl))) // the queue's own expiry
	}
}
