package setnxlock

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// The queue of a key's waiters. A waiting Acquire that queues (wait.go)
// pushes an entry "<Locker id>:<token>" on waitersKey(key), a sorted set
// scored by arrival, and every value written for that wait carries the
// entry's token: its own attempts' leases, and a release's handoff. Those
// values belong to that wait alone (one owner per value): its attempts
// recognise them by the token and nothing else claims them, so they never
// enter the Locker's lost-reply memory (pending.go).
//
// Every way out of the queue removes the entry: a win by SETNX or by
// claiming a handed key (queued.lua) and a takeover (deadlock.go) remove it
// in the same atomic step; a win through the lost-reply memory removes it
// at once after; a wait that gives up, or falls back from queueing, leaves
// (leave.lua), handing the key on if it carries the wait's token. A removal
// that fails on the network is remembered by the Locker's subscription,
// which declines the key for that entry if a release hands it over later
// (handoff.go). An entry nobody removes lives until the queue's own expiry.
//
// A late request never rolls a lease back (H10). Every later value of a
// queued win carries the entry's token too (its claim, Refresh, renewals),
// so a claim, which rewrites a value carrying that token without a watch
// (queued.lua), only moves the lease forward: it writes only over a value
// stating an earlier end than its own (claimable), and otherwise writes
// nothing and reports the value found. A copy of an earlier attempt held up
// in the network, or resent by go-redis, carries an older stamp, and finds
// nothing it may rewrite. The attempt that reads such a reply claims again
// at once with a value stating one millisecond past the found end
// (restamp). So a claim never writes the very value it found: that value
// may be the provisional one of a handoff nobody heard, and its releaser
// hands that on while the key holds it exactly (commandqueue.go). Both
// transports apply this one rule, the command transport inside its
// watched claim.

// leaveTimeout bounds the round trip that takes a waiter off the queue
// after its context ended.
const leaveTimeout = time.Second

// queueEntry is one waiting Acquire's place in a key's queue.
type queueEntry struct {
	key    string
	token  string // carried by every value written for this wait
	member string // "<Locker id>:<token>", in the key's queue
}

// newQueueEntry describes a wait of this Locker on key.
func (l *Locker) newQueueEntry(key string) *queueEntry {
	token := newToken()
	return &queueEntry{key: key, token: token, member: l.handoff.id + ":" + token}
}

// The outcomes of the queued attempt's script (queued.lua).
const (
	queuedHeld    = 0
	queuedWon     = 1
	queuedForeign = 2
	queuedRefused = 3
	queuedAhead   = 4
)

// suffix is how every value written for this wait ends: the entry's token
// after the separator. The scripts recognise the wait's values by it.
func (e *queueEntry) suffix() string { return string(tokenSeparator) + e.token }

// carries reports whether a value was written for this wait.
func (e *queueEntry) carries(value string) bool { return tokenOf(value) == e.token }

// claimable reports whether a claim with ours may rewrite current, the
// value found at the entry's key: only a value written for this wait that
// states an earlier end than ours does (H10: a claim only moves the lease
// forward), so a claim never writes the value it found.
func (e *queueEntry) claimable(current string, ours stamp) bool {
	if !e.carries(current) {
		return false
	}
	found, err := parseExpiry(current)
	return err == nil && found.Before(statedEnd(ours))
}

// restamp is the value a queued attempt claims with after its claim found
// current, a value written for its wait that states an end no earlier than
// ours (claimable): one stating a millisecond past current's end, so that
// the claim moves the lease forward and differs from the value found (see
// the top of this file). The holder still believes its own lease, ours's
// expiry by its own clock, which that value outlasts.
func (e *queueEntry) restamp(current string, ours stamp) (stamp, error) {
	found, err := parseExpiry(current)
	if err != nil {
		return stamp{}, err
	}
	return stamp{value: formatValue(found.Add(time.Millisecond), e.token), expiry: ours.expiry, start: ours.start}, nil
}

// statedEnd is the end our own value states: its expiry, or past it for a
// restamped claim.
func statedEnd(ours stamp) time.Time {
	end, err := parseExpiry(ours.value)
	if err != nil {
		return ours.expiry // not reached: our values always parse
	}
	return end
}

// queuedClaim is a queued attempt's first step: queued.lua, the SETNX,
// or the claim of a key that carries the entry's token, or a place in the
// queue.
func (p scriptPath) queuedClaim(ctx context.Context, key string, ours stamp, entry *queueEntry) (claimOutcome, error) {
	l := p.l
	keys := []string{key, waitersKey(key)}
	now := l.cfg.clock.Now().UnixMicro() // our arrival, if we are new to the queue
	reply, err := queuedScript.Run(ctx, l.client, keys, ours.value, l.safetyNet(ours.length()).Milliseconds(), entry.member, entry.suffix(), now,
		statedEnd(ours).UnixMilli()).Slice()
	if err != nil {
		return claimOutcome{}, err
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
		return claimOutcome{}, ErrNotLockValue
	}
	return claimOutcome{}, errors.New("setnxlock: unexpected reply from the queued attempt's script")
}

// dequeue takes entry off its key's queue after a win that did not: one
// through the lost-reply memory, or a SET NX on the commands. A failure is
// not remembered as a leave's is (abandon): the wait holds a lease that
// may carry the entry's token, and declining a message for the entry
// would hand that lease on. A handoff to the stale entry later is dropped
// (route), and costs the claim window.
func (l *Locker) dequeue(ctx context.Context, entry *queueEntry) {
	_ = l.client.ZRem(ctx, waitersKey(entry.key), entry.member).Err()
}

// leaveQueue takes entry off its key's queue and, if the key carries the
// entry's token, hands the key on (or deletes it). The caller's context may
// have ended, so it runs on its own short deadline. A leave that fails is
// remembered, so that a handoff to the entry is declined (handoff.go).
func (l *Locker) leaveQueue(ctx context.Context, entry *queueEntry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	if err := l.leave(ctx, entry); err != nil {
		now := l.cfg.clock.Now()
		l.handoff.abandon(entry, now, now.Add(l.safetyNet(l.cfg.ttl))) // the queue's own expiry
	}
}

// leave is one try at leaveQueue, on the Locker's path while the queue is
// allowed (leave.lua), else with the commands.
func (l *Locker) leave(ctx context.Context, entry *queueEntry) error {
	if !l.caps.allows(capQueue) {
		return commandPath{l}.leave(ctx, entry)
	}
	return l.onPath(func(p path) error { return p.leave(ctx, entry) })
}

// leave runs leave.lua. A refusal (of its queue key, for this ACL user)
// stops the Locker queueing, and the commands leave instead.
func (p scriptPath) leave(ctx context.Context, entry *queueEntry) error {
	channel := ""
	if p.l.caps.allows(capPubSub) {
		channel = WakeChannel(entry.key)
	}
	now := p.l.cfg.clock.Now().UnixMicro()
	err := leaveScript.Run(ctx, p.l.client, []string{entry.key, waitersKey(entry.key)},
		entry.member, entry.token, channel, strconv.FormatInt(now, 10), claimWindow.Milliseconds()).Err()
	if p.l.caps.narrow(capQueue, err) {
		return commandPath(p).leave(ctx, entry)
	}
	return err
}
