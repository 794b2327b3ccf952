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
// earlier end, which is the safe one to believe, and Refresh may be called
// again.
func (k *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: TTL %v is below 1ms", ErrInvalidArgument, ttl)
	}
	k.op.Lock()
	defer k.op.Unlock()
	if err := k.usable(ctx, "refresh"); err != nil {
		return err
	}
	l := k.locker
	now := l.cfg.clock.Now()
	if ends := k.ExpiresAt(); expired(ends, now) {
		return k.finish(fmt.Errorf("%w: the lease on %q expired at %s", ErrNotHeld, k.key, ends.UTC().Format(time.RFC3339Nano)))
	}
	expiry := now.Add(ttl).Truncate(time.Millisecond)
	value := formatValue(expiry, k.token)
	written, err := l.compareAndWrite(ctx, k.key, k.owns, func(pipe redis.Pipeliner) {
		pipe.Set(ctx, k.key, value, 0)
		pipe.PExpire(ctx, k.key, l.safetyNet(ttl))
	})
	if err != nil {
		return fmt.Errorf("setnxlock: refresh %q: %w", k.key, err)
	}
	if !written {
		return k.finish(fmt.Errorf("%w: %q no longer holds our value", ErrNotHeld, k.key))
	}
	k.mu.Lock()
	k.expiresAt = expiry
	k.mu.Unlock()
	l.observe(Event{Kind: EventRefreshed, Key: k.key, ExpiresAt: expiry, FencingToken: k.fencingToken})
	return nil
}
