package setnxlock

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// The queue protocol, stated once. A waiting Acquire that queues (wait.go)
// has an entry in its key's queue, waitersKey(key): a sorted set scored by
// arrival, in µs by the waiter's clock, first in line first. A release
// hands the key to the first waiter whose Locker hears of it, and a wait
// that ends leaves. Two transports implement the same steps
// (queueTransport): the scripts in lua/ (scriptqueue.go) and watched
// transactions of commands alone (commandqueue.go). Both take the
// encodings below from this file (the scripts as arguments, lua/protocol.lua)
// and keep the same invariants:
//
//   - One owner per value. Every value written for a wait carries its
//     entry's token: its own attempts' leases, a release's provisional
//     value, and every later value of a queued win (its claim, Refresh,
//     renewals). A value carries a token when the token is exactly the
//     bytes between its first ':' and the first '|' after it, or its end
//     (tokenOf, lua/value.lua): the waiter's own values carry its identity
//     after the '|', a provisional value none, since its releaser does
//     not know the waiter's, and the check never reads it. Only that
//     wait claims them, by its token, and they never enter the Locker's
//     lost-reply memory (pending.go), where another attempt could claim
//     them too. An attempt of a queued wait that does
//     not queue (the queue was refused) writes a token of its own.
//   - Write, then announce. A handoff takes the entry off the queue, writes
//     the provisional value and only then publishes the payload on the
//     Locker's channel, in one script or one MULTI/EXEC (PUBLISH last); a
//     write that fails is never announced.
//   - Heard is a provisional hold; only a claim makes it a lease. The
//     provisional value states an end claimWindow after the release, and
//     the handoff's message carries that end (formatPayload). The waiter
//     that hears it holds the key at once, until that end less its skew
//     margin and never past its receipt plus claimWindow, by its own clock
//     (heard.go); the server keeps the value for the window and the
//     releaser's grace (provisionalNet), so the net never ends that hold
//     early (H6). Its claim, sent at once in the Lock's turn, extends the
//     hold to a lease of its own clock (H4, H6), or ends the Lock as lost
//     no later than the provisional end. A waiter that died since it
//     queued costs the window: the page's takeover ends the value once its
//     stated end has passed; an entry whose Locker does not listen is
//     skipped at once.
//   - A claim never writes the value it found (H10). A claim rewrites a
//     value carrying its token without a watch (queued.lua, claim.lua) or under one
//     (claimHanded), and only over a value stating an earlier end than its
//     own (claimable): a late copy of an earlier attempt finds nothing to
//     roll back. An attempt that finds an end no earlier than its own
//     claims again at once one millisecond past it (restamp).
//   - Hand on only the exact provisional value. A handoff nobody heard is
//     handed on from the provisional value written for it, while the key
//     holds exactly that value: the waiter may be alive (its subscription
//     between two connections) and have claimed the key at its next poll,
//     or claimed and then refreshed it. No lease can equal a provisional
//     value, whatever the clocks say: a provisional value states its end
//     in milliseconds with a decimal point (provisionalMark), which no
//     lease of ours ever does (formatValue writes whole milliseconds), and
//     every reader reads it as the same instant (parseExpiry).
//   - Every way out of the queue removes the entry: a win by SETNX or by a
//     claim and a takeover in the same atomic step, a win through the
//     lost-reply memory right after (dequeue), a wait that gives up or
//     stops queueing by leaving, which hands on (or deletes) a value
//     carrying its token, even when taking the entry off is refused (X2).
//     A leave that fails is remembered by the Locker's subscription, which
//     declines a handoff to that entry later (handoff.go).
//
// A semaphore's permits share one queue (Locker.waitersOf, semwait.go):
// the steps are the same, on the permit released or attempted, and the
// payload names the permit handed. One step more:
//
//   - A permit is handed on only within the recorded count. The handoff
//     of permit i reads the semaphore's count (PermitsKey) in its own
//     atomic step, the script's or the watched transaction's (the count
//     key watched too), and hands the permit on only while i is below
//     it; at or past it (after a shrink, Resize) the permit is deleted
//     and its waiters woken. A missing count limits nothing; one that is
//     not a count (digits alone, of a positive integer within int64:
//     parseCount, handon.lua's recordedCount) hands nothing on. So a permit
//     heard was within the count when it was handed, and the wait keeps
//     it without reading the count again (Semaphore.Acquire).
//
// The scores are the waiters' clocks: with clocks apart, two waiters
// arriving within the skew of each other may be served in either order.

// queueSeparator separates an entry's Locker id from its token, and a
// handoff payload's token from its key.
const queueSeparator = ":"

// claimWindow is how long a waiter handed a key has to claim it: long
// enough for the handoff's message and the claim's round trip, or for the
// waiter's next poll (announcedPoll) when the message is lost; short
// enough that a waiter that died since it queued costs only that.
const claimWindow = 250 * time.Millisecond

// handoffChannelPrefix starts the channel a Locker listens on for locks
// handed to it, before the Locker's id.
const handoffChannelPrefix = "setnxlock:handoff:"

// handoffChannel names the channel of the Locker whose id is lockerID.
func handoffChannel(lockerID string) string { return handoffChannelPrefix + lockerID }

// formatEntry is a wait's entry in a queue: "<Locker id>:<token>".
func formatEntry(lockerID, token string) string { return lockerID + queueSeparator + token }

// parseEntry splits an entry into its Locker id and token; ok is false for
// a member that is not an entry (either part empty, or the token holding
// the separator): nobody to hand to.
func parseEntry(member string) (lockerID, token string, ok bool) {
	lockerID, token, ok = strings.Cut(member, queueSeparator)
	ok = ok && lockerID != "" && token != "" && !strings.Contains(token, queueSeparator)
	return lockerID, token, ok
}

// formatListener is the member a wait on wake-ups lists itself by in its
// key's queue (wakelisten.go): "<token>:", its own token and the
// separator. It is not an entry (parseEntry: its token part is empty), so
// no release hands the key to it: a release that finds it takes it off
// the queue and publishes on the key's wake channel (handon.lua,
// commandhandon.go).
func formatListener(token string) string { return token + queueSeparator }

// formatPayload is the message announcing key to the wait of token, on
// its Locker's channel: "<token>:<end>:<key>". For a handoff, end is the
// provisional value's end as written for the wait (provisionalEnd), from
// which the waiter knows the value and how long it may hold on it before
// its claim is confirmed (heard.go); for a wake-up to race for a key left
// free, end is empty. The key goes last: keys may hold the separator,
// tokens and ends never do.
func formatPayload(token, end, key string) string {
	return token + queueSeparator + end + queueSeparator + key
}

// parsePayload splits a handoff's message into the token, the provisional
// value's end ("" for a wake-up) and the key.
func parsePayload(payload string) (token, end, key string, ok bool) {
	token, rest, ok := strings.Cut(payload, queueSeparator)
	if !ok {
		return "", "", "", false
	}
	end, key, ok = strings.Cut(rest, queueSeparator)
	return token, end, key, ok
}

// provisionalMark follows a provisional value's end in Unix ms, before
// the value's separator: "<ms>.0:<token>". A fraction of a millisecond is
// read as none (parseExpiry, lua's tonumber), so every reader reads the
// instant a whole number would state; and since no lease is written with
// one, a provisional value never equals a lease (hand on only the exact
// provisional value; review R2: a holder's Refresh to the claim window,
// by a clock that agrees with the releaser's, wrote exactly the value of
// the handoff it had claimed, and the releaser handed that lease on).
const provisionalMark = ".0"

// provisionalEnd is the end a provisional value written at now states, as
// written: claimWindow later in Unix ms, and provisionalMark.
func provisionalEnd(now time.Time) string {
	var buf [24]byte // the stack: the string is the one allocation
	return string(appendProvisionalEnd(buf[:0], now))
}

// appendProvisionalEnd appends provisionalEnd(now) to b.
func appendProvisionalEnd(b []byte, now time.Time) []byte {
	return append(strconv.AppendInt(b, now.Add(claimWindow).UnixMilli(), 10), provisionalMark...)
}

// provisionalPrefix is a provisional value written at now without its
// token: its end (provisionalEnd) and the value's separator. The scripts
// read the end back from it, without its last byte (lua/protocol.lua).
func provisionalPrefix(now time.Time) string {
	var buf [24]byte
	return string(append(appendProvisionalEnd(buf[:0], now), tokenSeparator))
}

// provisionalValue is the value a release at now writes for the wait of
// token: ours (formatValue), stating an end claimWindow later.
func provisionalValue(now time.Time, token string) string {
	var buf [64]byte // a token fits beside the end
	return string(append(append(appendProvisionalEnd(buf[:0], now), tokenSeparator), token...))
}

// provisionalNet is how long the server keeps a provisional value: the
// claim window and the releaser's grace (safetyNet). The waiter may hold
// on the value until its stated end by its own clock (heard.go), so the
// net must not end it before then (H6); a handoff nobody claims is taken
// over once its stated end has passed (deadlock.go), still costing only
// the window by the clocks.
func (l *Locker) provisionalNet() time.Duration { return l.safetyNet(claimWindow) }

// appendProtocolArgs appends to args the encodings a script prefixed with
// lua/protocol.lua takes as its first arguments, for a release or a leave
// at now.
func (l *Locker) appendProtocolArgs(args []any, now time.Time) []any {
	return append(args, queueSeparator, handoffChannelPrefix, provisionalPrefix(now), l.args.provisionalNet)
}

// queueTransport is one transport of the protocol: the steps a queued
// wait and a release take, each atomic on the key and its queue. Waking
// the first in line, to race for a key left free, is part of handOn and
// leave on both (handon.lua and leave.lua; wakeHead), never a step of its
// own.
type queueTransport interface {
	// enqueueOrClaim is a queued attempt's first step: SETNX with ours;
	// else the claim of a value carrying entry's token and stating an
	// earlier end (claimable), taking the entry off the queue with it;
	// else the entry's place in the queue, kept if it has one, and the
	// value found.
	enqueueOrClaim(ctx context.Context, key string, ours stamp, entry *queueEntry) (claimOutcome, error)
	// claim is the claim of a wait that heard a handoff (heard.go): the
	// claim of a value carrying entry's token and stating an earlier end
	// (claimable), taking the entry off the queue with it. It never
	// creates the key and never queues: otherwise it writes nothing, and
	// reports the value found ("" for none).
	claim(ctx context.Context, key string, ours stamp, entry *queueEntry) (claimed bool, current string, err error)
	// handOn is a release of k's key: only if it holds k's value (H3), it
	// hands the key to the first waiter that hears of it and has waited
	// the starvation threshold, else deletes it, announces the release and
	// wakes the first waiter to race for it. It reports whether the key
	// was k's.
	handOn(ctx context.Context, k *Lock) (bool, error)
	// leave takes entry off its key's queue and hands on (or deletes) a
	// value carrying its token; a key left free wakes the next in line.
	leave(ctx context.Context, entry *queueEntry) error
}

// queueEntry is one waiting Acquire's place in a key's queue.
type queueEntry struct {
	key    string
	token  string // carried by every value written for this wait
	member string // formatEntry(Locker id, token), in the key's queue
}

// newQueueEntry describes a new wait of this Locker on key.
func (l *Locker) newQueueEntry(key string) *queueEntry { return l.queueEntryOf(key, newToken()) }

// queueEntryOf is the entry of this Locker's wait on key whose token is
// token: an attempt knows its wait by the token alone (stamp.queuedWait).
func (l *Locker) queueEntryOf(key, token string) *queueEntry {
	return &queueEntry{key: key, token: token, member: formatEntry(l.handoff.id, token)}
}

// at is the same entry seen from key, another key of its queue: a
// semaphore's entry is in the one queue of all its permits (semwait.go),
// and is left, or declined, permit by permit.
func (e *queueEntry) at(key string) *queueEntry {
	if e.key == key {
		return e
	}
	return &queueEntry{key: key, token: e.token, member: e.member}
}

// carries reports whether a value was written for this wait; nothing was
// for no wait (nil).
func (e *queueEntry) carries(value string) bool { return e != nil && tokenOf(value) == e.token }

// claimable reports whether a claim with ours may rewrite current, the
// value found at the entry's key: only a value written for this wait that
// states an earlier end than ours does (H10), so a claim never writes the
// value it found.
func (e *queueEntry) claimable(current string, ours stamp) bool {
	if !e.carries(current) {
		return false
	}
	found, err := parseExpiry(current)
	return err == nil && found.Before(statedEnd(ours))
}

// restamp is the value a queued attempt claims with after its claim found
// current, a value written for its wait that states an end no earlier than
// ours: one stating a millisecond past current's end, so that the claim
// moves the lease forward and differs from the value found. The holder
// still believes its own lease, ours's expiry by its own clock, which that
// value outlasts.
func restamp(current string, ours stamp) (stamp, error) {
	found, err := parseExpiry(current)
	if err != nil {
		return stamp{}, err
	}
	ours.value = formatValue(found.Add(time.Millisecond), ours.queuedWait, identityOf(ours.value))
	return ours, nil
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
