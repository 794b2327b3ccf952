package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Leader election on the lock. A candidate leads while it holds the lock
// on ElectionKey(name), taken with a fencing token and renewed in the
// background; the token is its term. Once it holds the lock it publishes
// who leads in the record at LeaderKey(name), written in a transaction
// watched on the lock key, so a record is only ever written by the lease
// that holds the key. The record carries the lease's owner token, and a
// reader believes it only while the lock key carries the same token and its
// lease is live: a stale record (its leader crashed, or a successor has
// won but not yet published) says nobody leads.
//
// Everything an election stores contains its name, in one Cluster slot:
//
//	ElectionKey(name)           the lock: "<lease end, Unix ms>:<owner token>"
//	FenceKey(ElectionKey(name)) the term counter, INCRed with each win
//	LeaderKey(name)             the record: "<term>:<owner token>:<value>"
//	LeaderChannel(name)         the record, published as it is written; "" on Resign
//
// so that a process in any language reads the leader with two GETs: the
// record's value, when its token equals the lock value's (after the first
// ':') and the lock value's number is in the future.

// ErrNoLeader reports that nobody leads an election: nobody has won it, the
// leader resigned, its lease has run out, or a new leader has won but not
// yet published its record.
var ErrNoLeader = errors.New("setnxlock: no leader")

// Leader is who leads an election, as Locker.Leader and Locker.Observe
// report it. The zero Leader means nobody leads.
type Leader struct {
	// Value is what the leader passed to Campaign.
	Value string
	// Term is the leader's fencing token: it strictly increases from one
	// leader of an election to the next. Terms start at 1.
	Term int64
	// ExpiresAt is the end of the leader's lease as last read; it moves as
	// the leader renews.
	ExpiresAt time.Time
	// Identity is who the leader's lease says holds it (WithIdentity), as
	// Leader read it; "" when the lease states none.
	Identity string
}

// Leadership is a won election: this candidate leads until it resigns or
// loses its lease. Its lease renews itself in the background. Its methods
// are safe for concurrent use.
type Leadership struct {
	name  string
	value string
	lock  *Lock // the lease on ElectionKey(name); its fencing token is the term
}

// Value returns the value the leadership was won with.
func (e *Leadership) Value() string { return e.value }

// Term returns the leadership's term: a fencing token that strictly
// increases from one leader of the election to the next, across crashes
// and takeovers (it needs persistence to survive a Redis restart, H9).
// Pass it with every write the leader makes, and have the resource reject
// terms lower than one it has accepted.
func (e *Leadership) Term() int64 { return e.lock.FencingToken() }

// Done returns a channel that is closed once the leadership has ended: by
// Resign, or by its loss (a renewal found the key no longer ours, or the
// lease ran out without one).
func (e *Leadership) Done() <-chan struct{} { return e.lock.Done() }

// Err returns nil while the candidate leads and after Resign, and an error
// matching ErrNotHeld once the leadership has been lost.
func (e *Leadership) Err() error { return e.lock.Err() }

// ExpiresAt returns the end of the leadership's current lease, by the
// Locker's clock; it moves with each renewal.
func (e *Leadership) ExpiresAt() time.Time { return e.lock.ExpiresAt() }

// Context returns a context derived from parent that is cancelled when the
// leadership ends; after a loss context.Cause matches ErrNotHeld. Run the
// leader's work under it.
func (e *Leadership) Context(parent context.Context) context.Context {
	return e.lock.Context(parent)
}

// Resign ends the leadership: it releases the lock and deletes the record,
// each only while it is still ours, so it never touches a later leader's
// keys. Afterwards Done is closed; Err is nil, unless the leadership had
// been lost before (Err then keeps reporting the loss). Resign returns nil
// once nothing of this leadership is left in Redis, including when it was
// already resigned or lost; an error (network, ctx) means something may be
// left, and Resign may be called again. Whatever it returns, the lease is
// no longer renewed.
func (e *Leadership) Resign(ctx context.Context) error {
	if err := e.lock.Release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
		return fmt.Errorf("setnxlock: resign %q: %w", e.name, err)
	}
	if err := e.lock.locker.unpublish(ctx, e.name, e.lock.token); err != nil {
		return fmt.Errorf("setnxlock: resign %q: %w", e.name, err)
	}
	return nil
}

// electionLocker is the Locker elections run on: the user's Locker's
// client and configuration, with what an election needs whatever the
// options say: owner tokens (the record names the lease it belongs to),
// fencing (the term) and auto-refresh (a leadership keeps itself).
type electionLocker struct {
	mu sync.Mutex
	l  *Locker // nil until the first election call
}

// made returns the election Locker if it has been made, else nil.
func (e *electionLocker) made() *Locker {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.l
}

// elections returns the Locker elections run on, made on first use.
func (l *Locker) elections() *Locker {
	l.election.mu.Lock()
	defer l.election.mu.Unlock()
	if l.election.l == nil {
		cfg := l.cfg
		cfg.format, cfg.fencing, cfg.autoRefresh = TokenFormat, true, true
		// New has validated the rest: a refresh interval given with
		// WithRefreshInterval is shorter than the TTL, and without one
		// renewals come every TTL/3.
		l.election.l = newLocker(l.client, cfg)
	}
	return l.election.l
}

// Campaign blocks until this candidate leads the election name, or ctx
// ends; it then returns an error matching both ErrNotAcquired and
// ctx.Err(). ctx bounds the wait only: a won leadership lasts until Resign
// or its loss, renewing its lease in the background whatever the Locker's
// options (every TTL/3, or WithRefreshInterval). value is published for
// Leader and Observe to read; it may be any string.
//
// Campaign never returns a leadership whose lease is already over: the
// record is written while the lock is ours, and the lease is checked
// against the Locker's clock after that. A Campaign that fails leaves
// nothing behind: a lock it won but could not publish is released, and its
// record, if written, deleted.
func (l *Locker) Campaign(ctx context.Context, name, value string) (*Leadership, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty election name", ErrInvalidArgument)
	}
	el := l.elections()
	for {
		lock, err := el.Acquire(ctx, ElectionKey(name))
		if err != nil {
			return nil, err
		}
		lead := &Leadership{name: name, value: value, lock: lock}
		err = el.publish(ctx, lead)
		if err == nil {
			return lead, nil
		}
		// Not published, or published by a lease that is over: give the
		// lock up and leave nothing behind, whatever ctx says.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.ttl)
		_ = lead.Resign(cleanup)
		cancel()
		switch ctxErr := ctx.Err(); {
		case ctxErr != nil:
			return nil, contextEnded(ElectionKey(name), ctxErr, err)
		case !errors.Is(err, errLeaseOver) && !errors.Is(err, ErrNotHeld):
			return nil, fmt.Errorf("setnxlock: campaign %q: %w", name, err) // ErrNoTransactions, a reply a retry would repeat
		}
		// The lease ended before it was published: campaign again.
	}
}

// errLeaseOver is publish's error for a lease that ended before the
// leadership could be handed out: the candidate campaigns again.
var errLeaseOver = errors.New("setnxlock: the lease ended before the leadership was published")
