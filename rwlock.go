package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A read/write lock is made of ordinary lock keys, so that every holder is
// a *Lock with everything a Lock does (Release, Refresh, Done, Context,
// auto-refresh, fencing, H3–H11 alike):
//
//   - the writer holds the lock key WriterKey(name), taken with
//     Locker.Acquire or TryAcquire: its queue, handoff, takeover of a
//     crashed writer and fencing are the lock's;
//   - each reader holds a lock key of its own, ReaderKey(name, id), whose
//     id is listed in the set ReadersKey(name), for writers to find.
//
// Invariant: while a writer holds the writer key and has found no live
// reader key, no reader holds a lease.
//
//   - A reader is admitted (admit) by one transaction watched on the
//     writer key and its queue: the writer key is free or its lease is
//     over (H4: judged as an acquisition judges a foreign lease) and no
//     one waits in its queue, or, for a reader that waited in that queue,
//     the writer key still holds that reader's own value; then MULTI,
//     SET ReaderKey, PEXPIRE (H6), SADD ReadersKey, with WithFencing the
//     INCR of the one counter FenceKey(WriterKey(name)), EXEC. A writer's
//     SETNX or takeover of the writer key either precedes the reader's
//     WATCH (the reader then reads a live value and refuses), or follows
//     it and precedes the EXEC (the EXEC aborts), or follows the EXEC (the
//     writer's drain then finds the reader key).
//   - A writer, once it holds the writer key, drains (drain): it waits
//     until no live reader key is listed, its own lease kept live
//     meanwhile. An expired reader key is deleted by a watched
//     compare-and-delete of the exact value judged (H1, H3): merely
//     ignored, it could be renewed by a late Refresh of its reader after
//     the writer judged it over, and two would hold.
//
// Fairness: a reader that is refused waits in the writer key's queue,
// with writers, in arrival order (Locker.Acquire); holding the writer
// key, it converts to a reader (admit with its Lock) and releases the
// writer key, which hands it to the next in line: consecutive readers at
// the head are admitted one handoff apart, and a writer behind them
// drains them. A reader never passes a queued writer: admission refuses
// while the queue holds anyone.
//
// H5: a reader transaction whose EXEC reply is lost may have written the
// reader key; it is deleted, while it holds exactly our value, before the
// error is returned (bounded by leaveTimeout), so a lost reply costs no
// writer a lease. H10: an EXEC held up in the network past that delete
// can still write an orphan reader key (its WATCH still guards it: it
// runs only if no writer touched the writer key meanwhile); writers wait
// out its one lease and then delete it. Liveness only.

// RWLock is a read/write lock shared by every Locker on the same Redis,
// made by Locker.RWLock: any number of readers, or one writer, each
// holding a lease. Its methods are safe for concurrent use.
type RWLock struct {
	locker *Locker
	name   string
}

// RWLock returns the read/write lock name. Nothing is sent to Redis. An
// empty name, or one whose keys could not share a Redis Cluster slot (it
// starts with '}'), is ErrInvalidArgument; so is a Locker that writes bare
// timestamps (WithFormat other than TokenFormat): a reader key is told
// from another client's only by its owner token.
//
// Every holder is a lock key of this Locker's options: its TTL,
// auto-refresh and fencing (with WithFencing, tokens of writers and
// readers come from one counter, FenceKey(WriterKey(name)): a writer's is
// greater than every earlier one, a reader's greater than the last
// writer's). All its keys share one Cluster slot.
func (l *Locker) RWLock(name string) (*RWLock, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty read/write lock name", ErrInvalidArgument)
	}
	if !hasHashTag(WriterKey(name)) {
		return nil, fmt.Errorf("%w: read/write lock name %q: its keys would not share a Cluster slot", ErrInvalidArgument, name)
	}
	if !l.cfg.format.tokens() {
		return nil, fmt.Errorf("%w: read/write lock %q: needs TokenFormat, its readers are told apart by owner token", ErrInvalidArgument, name)
	}
	return &RWLock{locker: l, name: name}, nil
}

// WriterKey returns the lock key the writers of the read/write lock name
// hold: "{name}.writer", or name plus ".writer" when name has a Redis
// Cluster hash tag of its own.
func WriterKey(name string) string { return sameSlotKey(name, ".writer") }

// ReaderKey returns the lock key of the reader id of the read/write lock
// name, in the slot of WriterKey(name).
func ReaderKey(name, id string) string { return sameSlotKey(name, ".reader."+id) }

// ReadersKey returns the set of the ids of the read/write lock name's
// readers, in the slot of WriterKey(name). It has no expiry: a net could
// end while a reader renewed past it lives; it vanishes when it empties,
// and writers prune the ids of readers that crashed.
func ReadersKey(name string) string { return sameSlotKey(name, readersSuffix) }

// readersSuffix ends the name of a read/write lock's set of readers.
const readersSuffix = ".readers"

// Name returns the read/write lock's name.
func (rw *RWLock) Name() string { return rw.name }

// TryRLock makes one attempt to take a read lock. It returns an error
// matching ErrNotAcquired when a writer holds the lock or waits for it,
// and ErrNotLockValue when the writer key holds something else (H7).
func (rw *RWLock) TryRLock(ctx context.Context) (*Lock, error) {
	return rw.admit(ctx, nil)
}

// RLock takes a read lock, waiting while a writer holds the lock or waits
// for it: in the writer key's queue, in arrival order with the writers.
// When ctx ends first it returns an error matching both ErrNotAcquired and
// ctx.Err().
func (rw *RWLock) RLock(ctx context.Context) (*Lock, error) {
	l, writer := rw.locker, WriterKey(rw.name)
	var held *Lock // the writer key, while a reader that waited in line converts
	for {
		lock, err := rw.admit(ctx, held)
		if held != nil {
			rw.giveUp(ctx, held) // hands the writer key to the next in line
		}
		switch {
		case err == nil:
			return lock, nil
		case ctx.Err() != nil:
			return nil, contextEnded(writer, ctx.Err(), err)
		case !retryable(err):
			return nil, err
		case held != nil:
			held = nil // its place in line was lost: look again
			continue
		}
		// Refused: wait in line with the writers, then convert.
		if held, err = l.Acquire(ctx, writer); err != nil {
			return nil, err
		}
	}
}

// TryLock makes one attempt to take the write lock: the writer key, kept
// only when no reader holds a live lease. It returns an error matching
// ErrNotAcquired when a writer or a reader holds the lock, and
// ErrNotLockValue when one of its keys holds something else (H7).
func (rw *RWLock) TryLock(ctx context.Context) (*Lock, error) {
	held, err := rw.locker.TryAcquire(ctx, WriterKey(rw.name))
	if err != nil {
		return nil, err
	}
	if err := rw.drain(ctx, held, false); err != nil {
		rw.giveUp(ctx, held)
		return nil, err
	}
	return held, nil
}

// Lock takes the write lock, waiting in the writer key's queue and then
// for the readers admitted before it to end (their releases, or their
// leases' ends): no reader is admitted meanwhile. When ctx ends first it
// returns an error matching both ErrNotAcquired and ctx.Err(), having
// given the writer key back.
func (rw *RWLock) Lock(ctx context.Context) (*Lock, error) {
	for {
		held, err := rw.locker.Acquire(ctx, WriterKey(rw.name))
		if err != nil {
			return nil, err
		}
		err = rw.drain(ctx, held, true)
		if err == nil {
			return held, nil
		}
		rw.giveUp(ctx, held)
		if !errors.Is(err, errWriterLost) {
			return nil, err
		}
		// The writer key was lost while draining: readers may have been
		// admitted since; stand in line again.
	}
}

// errWriterLost ends a drain whose writer key was lost meanwhile.
var errWriterLost = fmt.Errorf("%w: the writer key was lost while readers drained", ErrNotAcquired)

// drain returns nil once no reader of the lock holds a live lease while
// held, the writer key's Lock, is live; wait says whether to wait for
// them (Lock) or to refuse at once (TryLock). Waiting, it keeps held's
// lease renewed (unless its keeper does), listens for the readers'
// releases (announced on WakeChannel(ReadersKey(name)) by forget) and
// polls with backoff in case one goes unheard, never past the earliest
// reader's end. It looks again once its subscription is confirmed, so a
// release before that is seen. A reader key that is not a lock value (H7)
// blocks the writer: ErrNotLockValue.
func (rw *RWLock) drain(ctx context.Context, held *Lock, wait bool) error {
	l, writer := rw.locker, WriterKey(rw.name)
	retry := newBackoff(l.cfg.minBackoff, l.cfg.maxBackoff)
	var wake *wakeup
	defer func() { wake.close() }()
	for {
		if wake.listening() {
			// What was announced so far is older than the read below; a
			// release announced after it wakes the sleep. A gone
			// subscription is forgotten: the wait polls.
			wake.drain()
		}
		live, until, err := rw.liveReaders(ctx)
		now := l.cfg.clock.Now()
		switch {
		case held.Err() != nil || expired(held.ExpiresAt(), now):
			// Judged after the read: a reader could be admitted only once
			// the writer key's lease was over, and the read then proves
			// nothing.
			return errWriterLost
		case ctx.Err() != nil:
			return contextEnded(writer, ctx.Err(), err)
		case err != nil && (!wait || !retryable(err)):
			return err
		case err == nil && live == 0:
			return nil
		case err == nil && !wait:
			return fmt.Errorf("%w: %q: %d readers hold it, until %s at least", ErrNotAcquired, rw.name, live, until.UTC().Format(time.RFC3339Nano))
		}
		if !l.cfg.autoRefresh && held.ExpiresAt().Sub(now) < l.cfg.ttl/2 {
			if err := held.Refresh(ctx, l.cfg.ttl); errors.Is(err, ErrNotHeld) {
				return errWriterLost
			}
		}
		if wake == nil {
			wake = l.subscribeTo(ctx, WakeChannel(ReadersKey(rw.name)))
		}
		pause := retry.next()
		if r := until.Sub(now); err == nil && r > 0 && r < pause {
			pause = r
		}
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return contextEnded(writer, ctx.Err(), nil)
		case <-held.Done():
			timer.Stop()
			return errWriterLost
		case <-wake.confirming():
			wake.confirmed() // look again: a release before it went unheard
		case <-wake.announced():
		case <-timer.C:
		}
		timer.Stop()
	}
}

// giveUp releases the writer key held by a wait that does not keep it
// (a converted reader, a TryLock that found readers, a Lock whose context
// ended), even when ctx has ended, within leaveTimeout: the release hands
// it to the next in line. A release that fails in transit leaves the key
// to its lease's end.
func (rw *RWLock) giveUp(ctx context.Context, held *Lock) {
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	_ = held.lossOrRelease(releaseCtx)
}
