package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Admitting a reader of a read/write lock: the reader transaction whose
// safety argument rwlock.go states.

// admit is the reader transaction. holder is nil for a reader that has
// not waited: the writer key must be free or its lease over (H4), and
// its queue empty, so that no reader passes a queued writer; else holder
// is the writer key's Lock of a reader that waited in that queue, and the
// key must still hold a value of holder's (by its token: the provisional
// value of a handoff and its claim both carry it, heard.go). The reader's
// value is the Locker's stamp with a fresh token, which is also its id;
// its Lock is handed out as an acquisition's (grantReplicated).
func (rw *RWLock) admit(ctx context.Context, holder *Lock) (*Lock, error) {
	l := rw.locker
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("setnxlock: read lock %q: %w", rw.name, err)
	}
	if err := l.checkTransactions(ctx); err != nil {
		return nil, err
	}
	acq := l.newAcquireCall()
	acq.attempts++
	ours := l.attemptStamp(l.cfg.clock.Now(), "")
	id := tokenOf(ours.value)
	key := ReaderKey(rw.name, id)
	var incr *redis.IntCmd
	var err error
	for range maxTransactionAttempts {
		if incr, err = rw.admitOnce(ctx, holder, key, id, ours); !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	switch {
	case errors.Is(err, ErrNotAcquired), errors.Is(err, ErrNotLockValue):
		return nil, err // nothing written
	case errors.Is(err, redis.TxFailedErr):
		return nil, fmt.Errorf("%w: read lock %q: its keys changed under us %d times", ErrNotAcquired, rw.name, maxTransactionAttempts)
	case err != nil:
		// H5: the EXEC may have run and only its reply been lost. The
		// reader key is deleted while it holds exactly our value, so the
		// lost reply costs no writer a lease.
		_, undoErr := rw.dropReader(ctx, key, id, ours.value)
		return nil, errors.Join(fmt.Errorf("setnxlock: read lock %q: %w", rw.name, err), undoErr)
	}
	var token int64
	if incr != nil {
		if token, err = incr.Result(); err != nil {
			// The EXEC ran: an INCR that fails then found no integer (H7).
			_, undoErr := rw.dropReader(ctx, key, id, ours.value)
			return nil, errors.Join(errFenceNotCounter(l.fenceCounter(WriterKey(rw.name))), undoErr)
		}
	}
	lock, err := l.grantReplicated(ctx, key, ours, token, EventAcquired, &acq)
	if err != nil {
		return nil, err // its key undone, or left to its lease; its id pruned by writers
	}
	lock.afterRelease = func(ctx context.Context) { rw.forget(ctx, id) }
	return lock, nil
}

// forget takes the released reader id off the list, and announces the
// release to the writers draining the readers (drain), in one round trip,
// within leaveTimeout even when ctx has ended. Best effort: a writer
// prunes an id left behind, and polls when no announcement comes. A
// refused PUBLISH switches wake-ups off for the Locker, as elsewhere.
func (rw *RWLock) forget(ctx context.Context, id string) {
	l := rw.locker
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	readers := ReadersKey(rw.name)
	if !l.caps.allows(capPubSub) {
		_ = l.client.SRem(ctx, readers, id).Err()
		return
	}
	var publish *redis.IntCmd
	_, _ = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.SRem(ctx, readers, id)
		publish = pipe.Publish(ctx, WakeChannel(readers), id)
		return nil
	})
	l.caps.narrow(capPubSub, publish.Err())
}

// admitOnce is one run of the reader transaction: WATCH the writer key
// and its queue, read both, and, when admissible, MULTI SET, PEXPIRE (H6,
// the net of the Locker's other leases), SADD and with fencing INCR,
// EXEC. SET then PEXPIRE, not SET PX: classic servers take it too.
func (rw *RWLock) admitOnce(ctx context.Context, holder *Lock, key, id string, ours stamp) (incr *redis.IntCmd, err error) {
	l := rw.locker
	writer := WriterKey(rw.name)
	waiters := waitersKey(writer)
	var queued *redis.IntCmd
	w := watched{also: []string{waiters}, read: func(pipe redis.Pipeliner) { queued = pipe.ZCard(ctx, waiters) }}
	err = l.watchWith(ctx, writer, w, func(tx *redis.Tx, get *redis.StringCmd) error {
		if refused := rw.admissible(get, queued, holder); refused != nil {
			return errors.Join(refused, unwatch(ctx, tx))
		}
		var set *redis.StatusCmd
		cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			set = pipe.Set(ctx, key, ours.value, 0)
			pipe.PExpire(ctx, key, l.safetyNet(ours.length()))
			pipe.SAdd(ctx, ReadersKey(rw.name), id)
			if l.cfg.fencing {
				incr = pipe.Incr(ctx, l.fenceCounter(writer))
			}
			return nil
		})
		if set.Err() == nil && incr != nil && isReplyError(incr.Err()) {
			return nil // the EXEC ran, and its INCR failed: admit undoes the reader (H7)
		}
		return withCause(cmds, err)
	})
	return incr, err
}

// admissible judges what the reader transaction's watch read: nil to
// admit, ErrNotAcquired while a writer holds the key or anyone waits in
// its queue (or, for holder, the key is no longer holder's), and
// ErrNotLockValue for a writer key that holds no lock value (H7).
func (rw *RWLock) admissible(get *redis.StringCmd, queued *redis.IntCmd, holder *Lock) error {
	l := rw.locker
	writer := WriterKey(rw.name)
	current, found, err := stringReply(get)
	if err != nil {
		return fmt.Errorf("setnxlock: read lock %q: writer key %q: %w", rw.name, writer, err)
	}
	if holder != nil {
		// owns reads only holder's token here, set before the Lock was
		// handed out and never changed (RWLock requires TokenFormat), so
		// it needs no turn of holder's, even while a handoff's claim is
		// in flight (heard.go).
		if !found || !holder.owns(current) {
			return fmt.Errorf("%w: read lock %q: the writer key is no longer this reader's place in line", ErrNotAcquired, rw.name)
		}
		return nil
	}
	if found {
		ends, err := heldUntil(current)
		if err != nil {
			return fmt.Errorf("setnxlock: read lock %q: writer key %q: %w", rw.name, writer, err)
		}
		// H4: a writer's lease is over only as an acquisition judges a
		// foreign lease, the skew margin after its stated end.
		if !expired(l.takeableAt(ends), l.cfg.clock.Now()) {
			return fmt.Errorf("%w: read lock %q: a writer holds it until %s", ErrNotAcquired, rw.name, ends.UTC().Format(time.RFC3339Nano))
		}
	}
	n, err := queued.Result()
	if err != nil {
		return fmt.Errorf("setnxlock: read lock %q: the queue of %q: %w", rw.name, writer, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: read lock %q: %d wait for it", ErrNotAcquired, rw.name, n)
	}
	return nil
}
