package setnxlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Refresh moves the end of our lease to ttl from now, if the key still
// holds our value and our lease has not expired; otherwise it returns an
// error matching ErrNotHeld and writes nothing (H3). The value is replaced
// and the server-side safety net reset (H6) in one watched transaction. On a
// network error the lease may or may not have moved: ExpiresAt keeps the
// earlier of the old and the new end, the safe one to believe, and Refresh
// may be called again. Refresh on a nil Lock returns ErrNotHeld.
//
// Refresh never outlasts the lease (H11): if the lease ends by the
// Locker's clock before Redis confirms the renewal, the lock is lost at
// that instant and Refresh returns an error matching ErrNotHeld, whatever
// the client's timeouts; a confirmation that arrives later cannot bring
// the lock back, and the renewed value is deleted while it is still ours.
// Within the lease, ctx bounds the round trip only on a go-redis client
// with ContextTimeoutEnabled; others end it at their ReadTimeout.
func (k *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if k == nil {
		return errNilLock
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: TTL %v is below 1ms", ErrInvalidArgument, ttl)
	}
	err := k.inTurn(ctx, "refresh", func() error { return k.refresh(ctx, ttl) }, k.lostWith("refresh"))
	k.refreshFailed(err)
	return err
}

// refresh is Refresh's round trip, run in the Lock's turn (inTurn).
func (k *Lock) refresh(ctx context.Context, ttl time.Duration) error {
	if err := k.callable(ctx, "refresh"); err != nil {
		return err
	}
	if k.lease.over() { // once lost, always lost: Done and Err have said so
		return k.Err()
	}
	l := k.locker
	now := l.cfg.clock.Now()
	if ends := k.ExpiresAt(); expired(ends, now) {
		return k.finish(lost, fmt.Errorf("%w: the lease on %q expired at %s", ErrNotHeld, k.key, ends.UTC().Format(time.RFC3339Nano)))
	}
	renewed := l.newStamp(now, ttl, k.token)
	// H3: only while the key, or every key of a group, holds our value; a
	// group is renewed all or nothing (group.go).
	written, err := k.setOwned(ctx, func(pipe redis.Pipeliner, key string) {
		pipe.Set(ctx, key, renewed.value, 0)
		pipe.PExpire(ctx, key, l.safetyNet(renewed.length()))
	})
	if err == nil && written {
		// H9: a renewal the replicas did not acknowledge before the old
		// lease ended is believed no more than one lost on the network.
		err = l.replicate(ctx, ourWrite{k.key, renewed.value}, renewed.length(), k.ExpiresAt(), k.alsoWritten(renewed.value)...)
	}
	if err != nil {
		// The new end may or may not be stored: believe the earlier one,
		// and recognise either value as ours.
		if k.token == "" {
			k.maybe = append(k.maybe, renewed.value)
		}
		if k.lease.over() {
			// H11: lost at the lease's end while this renewal was in flight;
			// if it was applied all the same, free the key while it is ours.
			k.discard(ctx)
		}
		if ends := l.ourLeaseEnd(renewed.expiry, now); ends.Before(k.ExpiresAt()) {
			k.lease.move(k.lease.began(), ends)
		}
		return fmt.Errorf("setnxlock: refresh %q: %w", k.key, err)
	}
	if !written {
		return k.finish(lost, fmt.Errorf("%w: %q no longer holds our value", ErrNotHeld, k.key))
	}
	k.value, k.maybe = renewed.value, nil
	if !k.lease.move(now, l.ourLeaseEnd(renewed.expiry, now)) {
		// H11: the lease ran out before this renewal was confirmed, and the
		// lock was declared lost then. The key holds a lease nobody will
		// use: free it while it is still ours, so nobody waits it out.
		k.discard(ctx)
		return k.Err()
	}
	l.observe(Event{Kind: EventRefreshed, Key: k.key, ExpiresAt: k.ExpiresAt(), FencingToken: k.fencingToken})
	return nil
}

// discard deletes our value of a lock that is over, if the key still holds
// it, and wakes the waiters; bounded whatever ctx says. The caller holds
// the Lock's turn.
func (k *Lock) discard(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if k.keys != nil {
		_, _ = k.locker.deleteAllOwned(ctx, k.keys, k.owns)
		return
	}
	_, _ = k.locker.deleteOwned(ctx, k.key, k.owns)
}
