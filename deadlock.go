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

// expired reports whether a lease ending at expiry is over at now. The SETNX
// page's rule: a timestamp <= the current time is no longer valid.
func expired(expiry, now time.Time) bool {
	return !expiry.After(now)
}

// takeOver replaces the expired value it read with a lease of our own. It
// never deletes the old value and then SETNXes (H1, the page's C1/C2 race):
// GETSET swaps in our value and returns the old one in one step, and we own
// the lock only if what it returned was still expired or missing. Of all the
// clients racing on the same expired value exactly one sees that.
func (l *Locker) takeOver(ctx context.Context, key, expiredValue string) (*Lock, time.Time, error) {
	expiry := l.leaseFrom(l.cfg.clock.Now())
	value := formatValue(expiry, newToken(), takeoverTag(expiredValue))

	old, found, err := l.getset(ctx, key, value)
	if err != nil {
		// With the reply lost we cannot know whether we won, so we must not
		// claim the lock; our value blocks the key until it expires.
		return nil, time.Time{}, fmt.Errorf("setnxlock: GETSET %q: %w", key, err)
	}
	if !found {
		// The key vanished since we read it; GETSET created it with our value.
		return l.newLock(key, value, expiry), time.Time{}, nil
	}
	oldExpiry, parseErr := parseExpiry(old)
	if parseErr == nil && expired(oldExpiry, l.cfg.clock.Now()) {
		return l.newLock(key, value, expiry), time.Time{}, nil
	}

	// We lost: someone else's live lease (or, H7, something that is not a
	// lock at all) was overwritten by our value. Put it back (H2).
	if err := l.restore(ctx, key, value, old); err != nil {
		return nil, time.Time{}, fmt.Errorf("setnxlock: restore %q after a lost GETSET race: %w", key, err)
	}
	if parseErr != nil {
		return nil, time.Time{}, fmt.Errorf("setnxlock: key %q: %w", key, parseErr)
	}
	return nil, oldExpiry, fmt.Errorf("%w: %q was taken over by another client first", ErrNotAcquired, key)
}

// restore undoes a losing GETSET (H2): if the key still holds the value we
// wrote, put back the value GETSET returned, so its owner can still release
// and refresh it. If the key no longer holds our value, another racer's
// GETSET replaced it after ours and that racer restores our value in turn;
// when such restores interleave badly a racer's value may remain, which the
// holder still recognises as a leftover by its takeover tag (Lock.owns).
func (l *Locker) restore(ctx context.Context, key, ours, previous string) error {
	_, err := l.compareAndWrite(ctx, key,
		func(current string) bool { return current == ours },
		func(pipe redis.Pipeliner) { pipe.Set(ctx, key, previous, 0) })
	return err
}
