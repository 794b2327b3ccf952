package setnxlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Handling deadlocks: a holder that crashed never releases, so its lease is
// recognised as over once its expiry timestamp has passed and is then taken
// over, following the SETNX page.

// restoreTimeout bounds the restore of a value a GETSET should never have
// replaced; it runs even when the caller's context has ended, since leaving
// our value in someone else's place is worse than a late return.
const restoreTimeout = time.Second

// takeOver replaces the expired value it read with a lease of our own, on
// the Locker's path (onPath): takeover.lua where scripts run, else the
// watched transaction (watchedTakeOver), which is also where a refusal of
// the script falls back to. Both are the same conditional step: the key is
// written only while it still holds the very value we judged expired, so
// of all the clients racing for it exactly one writes, and the losers
// write nothing (H1, H2). A takeover for a queued wait writes the wait's
// token and takes its entry off the queue in the same step (protocol.go).
//
// startOver is true when the key no longer holds expiredValue: someone else
// took it over or released it, or it became another type; the caller should
// look again.
func (l *Locker) takeOver(ctx context.Context, key, expiredValue, queuedWait string, acq *acquireCall) (lock *Lock, startOver bool, err error) {
	ours := l.attemptStamp(l.cfg.clock.Now(), queuedWait)
	var won takeover
	err = l.onPath(func(p path) error {
		won, err = p.takeOver(ctx, key, expiredValue, ours)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if !won.written {
		return nil, true, nil
	}
	lock, err = l.grantReplicated(ctx, key, ours, won.fencingToken, EventRecovered, acq)
	return lock, false, err
}

// takeover is what a path's takeover did: whether it wrote our value over
// the expired one, and then the fencing token drawn with it.
type takeover struct {
	written      bool
	fencingToken int64
}

// takeOver is the command path's takeover: the watched transaction.
func (p commandPath) takeOver(ctx context.Context, key, expiredValue string, ours stamp) (takeover, error) {
	return p.l.watchedTakeOver(ctx, key, expiredValue, ours)
}

// watchedTakeOver never deletes the old value and then SETNXes (H1, the
// page's C1/C2 race). It sends the page's GETSET, but inside WATCH key, GET
// key, MULTI, GETSET, EXEC: the transaction runs only while the key still
// holds the very value we judged expired, so of all the clients racing for
// it at most one GETSET executes. A bare GETSET would let every loser
// overwrite the winner's value and rely on each loser to put it back (H2);
// a loser whose reply was lost, whose context ended or whose process died
// would leave its own value, which may expire before the winner's lease
// and let a third client in. With the watch, a loser writes nothing.
func (l *Locker) watchedTakeOver(ctx context.Context, key, expiredValue string, ours stamp) (takeover, error) {
	queuedWait := ours.queuedWait
	getset := redis.NewStringCmd(ctx, "getset", key, ours.value)
	var fence *redis.IntCmd

	written, err := l.compareAndWrite(ctx, key,
		func(current string) bool { return current == expiredValue },
		func(pipe redis.Pipeliner) {
			_ = pipe.Process(ctx, getset)
			// GETSET clears any TTL; put the safety net back in the same
			// transaction (H6).
			pipe.PExpire(ctx, key, l.safetyNet(ours.length()))
			if l.cfg.fencing {
				fence = pipe.Incr(ctx, l.fenceCounter(key)) // drawn with the takeover, atomically
			}
			if queuedWait != "" {
				l.dequeue(ctx, pipe, key, queuedWait)
			}
		})
	if err != nil && fence != nil && getset.Err() == nil && isReplyError(fence.Err()) {
		// The counter is not an integer (H7): the GETSET ran, the INCR
		// did not. Undo our write; the value it replaced was over.
		_, _ = l.undoWrite(ctx, key, ours.value)
		return takeover{}, errFenceNotCounter(l.fenceCounter(key))
	}
	if err != nil {
		if queuedWait != "" {
			l.caps.narrow(capQueue, err) // the queue refused inside transactions: stop queueing
		}
		// H5: if EXEC ran before its reply was lost, the key held the
		// expired value and the lease is rightfully ours (WATCH guarantees
		// it); let the next attempt recognise it.
		l.remember(key, ours)
		return takeover{}, fmt.Errorf("setnxlock: take over %q: %w", key, err)
	}
	if !written {
		return takeover{}, nil
	}
	if err := l.tookOver(ctx, key, ours, getset); err != nil {
		return takeover{}, err
	}
	var token int64
	if fence != nil {
		token = fence.Val()
	}
	return takeover{written: true, fencingToken: token}, nil
}

// tookOver reads the reply of a takeover's GETSET, which ran. The page's
// check: the lock is ours only if the old value is still expired (or
// missing). Under WATCH it always is. If it is not, the server or a proxy
// ignores WATCH: we have overwritten someone's live lease. Put it back as
// best we can and stop: without WATCH neither takeover nor release is
// safe, and a retry would only do it again.
func (l *Locker) tookOver(ctx context.Context, key string, ours stamp, getset *redis.StringCmd) error {
	old, found, err := stringReply(getset)
	if err != nil {
		return fmt.Errorf("setnxlock: GETSET %q: %w", key, err)
	}
	oldExpiry, parseErr := parseExpiry(old)
	if !found || parseErr == nil && expired(oldExpiry, l.cfg.clock.Now()) {
		return nil
	}
	if err := l.restore(ctx, key, ours.value, old); err != nil {
		return fmt.Errorf("%w: GETSET on %q replaced a live lease, and putting it back failed: %w", ErrWatchIgnored, key, err)
	}
	return fmt.Errorf("%w: GETSET on %q replaced a live lease; it was put back", ErrWatchIgnored, key)
}

// restore puts back the value a GETSET replaced, if the key still holds the
// value we wrote. It is a courtesy on a server that ignores WATCH, where it
// is not atomic either (H2).
func (l *Locker) restore(ctx context.Context, key, ours, previous string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	defer cancel()
	_, err := l.compareAndWrite(ctx, key,
		func(current string) bool { return current == ours },
		func(pipe redis.Pipeliner) { pipe.Set(ctx, key, previous, 0) })
	return err
}
