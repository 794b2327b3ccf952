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
	n, _, err := s.agreeAndLook(ctx, false)
	return n, err
}

// agreeAndLook is agree and, when look is set, in the same round trip a
// look at the permits (MGET, a command as old as GET): held[i] says that
// permit i held a lease that was live by the Locker's clock (judge's
// rule), so that an attempt on it would only be refused. A single pass
// then tries only the others, and a pass that finds every permit held
// costs this one round trip, not one per permit. The look decides nothing
// about holding: a permit it calls free is tried as ever, and a key that
// holds something else (H7: not a string, or not a lock value) is not
// called held, so that its attempt reports it. held is nil when the look
// failed or was not asked for: then every permit is tried.
func (s *Semaphore) agreeAndLook(ctx context.Context, look bool) (n int, held []bool, err error) {
	n = s.Permits()
	key := PermitsKey(s.name)
	var get *redis.StringCmd
	var values *redis.SliceCmd
	_, err = s.locker.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		_ = pipe.Process(ctx, redis.NewIntCmd(ctx, "setnx", key, n)) // the classic command: records the count only where none is
		get = pipe.Get(ctx, key)
		if look {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = s.permitKey(i)
			}
			values = pipe.MGet(ctx, keys...)
		}
		return nil
	})
	if isWrongType(get.Err()) {
		return 0, nil, fmt.Errorf("%w: semaphore %q: its count at %s is not a string; left untouched", ErrNotLockValue, s.name, key)
	}
	if err != nil && get.Err() != nil {
		return 0, nil, fmt.Errorf("setnxlock: semaphore %q: reading its count at %s: %w", s.name, key, err)
	}
	recorded, err := parseCount(get.Val())
	if err != nil {
		return 0, nil, fmt.Errorf("%w: semaphore %q: its count at %s is %q, not a number of permits", ErrNotLockValue, s.name, key, get.Val())
	}
	if recorded != n {
		return 0, nil, fmt.Errorf("%w: semaphore %q has %d permits recorded at %s, this client asks for %d", ErrPermitsMismatch, s.name, recorded, key, n)
	}
	if values == nil || values.Err() != nil || len(values.Val()) != n {
		return n, nil, nil
	}
	now := s.locker.cfg.clock.Now()
	held = make([]bool, n)
	for i, v := range values.Val() {
		value, isString := v.(string)
		held[i] = isString && s.locker.liveLease(value, now)
	}
	return n, held, nil
}

// parseCount reads a recorded count: a positive decimal integer within
// int64, digits alone (leading zeros allowed), as handon.lua's
// recordedCount reads it too: both transports hand permits on by one rule.
func parseCount(value string) (int, error) {
	for _, c := range []byte(value) {
		if c < '0' || c > '9' {
			return 0, strconv.ErrSyntax
		}
	}
	n, err := strconv.Atoi(value)
	if err == nil && n < 1 {
		err = strconv.ErrRange
	}
	return n, err
}

// Resize records permits as the semaphore's count, replacing the one
// recorded, and makes it this client's. It is an operator's act (the
// setnxlock CLI's "semaphore resize" does it): other clients' acquisitions
// fail with ErrPermitsMismatch until they are given the new count. An
// Acquire that was waiting keeps a permit handed to it from then on, which
// is within the new count (a release hands on a permit only while its
// index is below the recorded count, and deletes one past it), and gives
// back one its own attempt takes. Shrinking never revokes a live permit:
// holders of permits past the new count keep them until they release them
// or their leases end, and no acquisition keeps those permits again; until
// then more holders than the new count may live. A single attempt
// (TryAcquire, or Acquire's first pass) that read the old count just
// before the record changed may still finish on it. A count key of another
// type is left untouched (ErrNotLockValue). permits < 1 is
// ErrInvalidArgument, and nothing is written.
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
