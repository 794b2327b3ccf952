package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Handing out a lock an attempt's own write just won: once the replicas
// have it (WithReplicas), as a Lock whose lease is still live.

// grantReplicated is grant for a lease our write just won, once enough
// replicas have it. Otherwise the write is undone: deleted while the key
// holds exactly our value, and waiters woken. A bare timestamp is undone
// only when the server holding it answered (a failover may have put an
// identical value of another client's where ours was). If the undo
// fails, the write is remembered as one whose reply was lost (H5), so
// that the next attempt takes it (through here again) instead of waiting
// out our own lease.
func (l *Locker) grantReplicated(ctx context.Context, key string, ours stamp, fencingToken int64, kind EventKind, acq *acquireCall) (*Lock, error) {
	err := l.replicate(ctx, ourWrite{key, ours.value}, ours.length(), ours.expiry)
	if err == nil {
		return l.grant(key, ours, fencingToken, kind, acq)
	}
	if !l.cfg.format.tokens() && (!errors.Is(err, ErrNotReplicated) || errors.Is(err, errNotOurs)) {
		return nil, err
	}
	if _, undoErr := l.undoWrite(ctx, key, ours.value); undoErr != nil {
		l.remember(key, ours)
		return nil, errors.Join(err, fmt.Errorf("setnxlock: undo of %q: %w", key, undoErr))
	}
	return nil, err
}

// announceWin reports a win at now to the observer, with what the call
// that won it knows (acquireCall.report).
func (l *Locker) announceWin(e Event, now time.Time, acq *acquireCall) {
	if l.cfg.observer == nil {
		return
	}
	acq.report(l, &e, now)
	l.observe(e)
}

// grant hands out the lock we just won, unless its lease already ended
// while we waited for Redis's reply (a stall like H8's): a Lock that is over
// before the caller sees it would only invite work outside the lease. The
// lease ends, for us, when we believe it does (H4: ourLeaseEnd).
func (l *Locker) grant(key string, ours stamp, fencingToken int64, kind EventKind, acq *acquireCall) (*Lock, error) {
	return l.grantKeys(key, nil, ours, fencingToken, kind, acq)
}

// grantKeys is grant of a lock on key that, for a group (keys non-nil,
// key its first), holds every key of keys; they are set before the keeper
// starts, which reads them.
func (l *Locker) grantKeys(key string, keys []string, ours stamp, fencingToken int64, kind EventKind, acq *acquireCall) (*Lock, error) {
	now := l.cfg.clock.Now()
	ends := l.ourLeaseEnd(ours.expiry, now)
	if expired(ends, now) {
		return nil, fmt.Errorf("%w: %q: our lease ended before the reply arrived", ErrNotAcquired, key)
	}
	lock := l.newLock(key, ours.start, ends, now)
	lock.token, lock.value, lock.fencingToken, lock.keys = tokenOf(ours.value), ours.value, fencingToken, keys
	if !l.cfg.format.tokens() {
		lock.token = ""
	}
	l.announceWin(Event{Kind: kind, Key: key, ExpiresAt: ends, FencingToken: fencingToken}, now, acq)
	if l.cfg.autoRefresh {
		lock.startKeeper()
	}
	return lock, nil
}
