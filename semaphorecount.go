package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A semaphore's count is agreed, not assumed: the first acquisition of any
// client records it at PermitsKey(name) with SETNX, and every acquisition
// reads it back in the same round trip and goes on only when it is the
// client's own. So no client takes a permit beyond the recorded count,
// and at most that many leases live on the permits. Changing it is an
// operator's act (Resize).

// agree records the semaphore's count if none is, and returns it when the
// recorded one is this client's; otherwise ErrPermitsMismatch, and nothing
// is written but the record of a count that was missing.
func (s *Semaphore) agree(ctx context.Context) (int, error) {
	n := s.Permits()
	key := PermitsKey(s.name)
	var get *redis.StringCmd
	_, err := s.locker.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		_ = pipe.Process(ctx, redis.NewIntCmd(ctx, "setnx", key, n)) // the classic command: records the count only where none is
		get = pipe.Get(ctx, key)
		return nil
	})
	if isWrongType(get.Err()) {
		return 0, fmt.Errorf("%w: semaphore %q: its count at %s is not a string; left untouched", ErrNotLockValue, s.name, key)
	}
	if err != nil && get.Err() != nil {
		return 0, fmt.Errorf("setnxlock: semaphore %q: reading its count at %s: %w", s.name, key, err)
	}
	recorded, err := parseCount(get.Val())
	if err != nil {
		return 0, fmt.Errorf("%w: semaphore %q: its count at %s is %q, not a number of permits", ErrNotLockValue, s.name, key, get.Val())
	}
	if recorded != n {
		return 0, fmt.Errorf("%w: semaphore %q has %d permits recorded at %s, this client asks for %d", ErrPermitsMismatch, s.name, recorded, key, n)
	}
	return n, nil
}

// parseCount reads a recorded count: a positive decimal integer.
func parseCount(value string) (int, error) {
	n, err := strconv.Atoi(value)
	if err == nil && n < 1 {
		err = strconv.ErrRange
	}
	return n, err
}

// Resize records permits as the semaphore's count, replacing the one
// recorded, and makes it this client's. It is an operator's act (the
// setnxlock CLI's "semaphore resize" does it): other clients' acquisitions
// fail with ErrPermitsMismatch until they are given the new count, and an
// Acquire that was waiting gives back the permit its wait ends with.
// Shrinking never revokes a live permit: holders of permits past the new
// count keep them until they release them or their leases end, and no
// acquisition keeps those permits again; until then more holders than the
// new count may live. A single attempt (TryAcquire, or Acquire's first
// pass) that read the old count just before the record changed may still
// finish on it. A count key of another type is left untouched
// (ErrNotLockValue). permits < 1 is ErrInvalidArgument, and nothing is
// written.
func (s *Semaphore) Resize(ctx context.Context, permits int) error {
	if permits < 1 {
		return fmt.Errorf("%w: semaphore %q: %d permits (at least 1)", ErrInvalidArgument, s.name, permits)
	}
	// GETSET, the classic command: a key of another type refuses it, and
	// is left untouched (H7).
	key := PermitsKey(s.name)
	if err := s.locker.client.Process(ctx, redis.NewStringCmd(ctx, "getset", key, permits)); err != nil && !errors.Is(err, redis.Nil) {
		if isWrongType(err) {
			return fmt.Errorf("%w: semaphore %q: its count at %s is not a string; left untouched", ErrNotLockValue, s.name, key)
		}
		return fmt.Errorf("setnxlock: semaphore %q: recording %d permits: %w", s.name, permits, err)
	}
	s.permits.Store(int64(permits))
	return nil
}
