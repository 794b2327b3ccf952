package setnxlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// SemaphoreStatus is what a semaphore's keys hold, read without writing
// anything (Semaphore.Status).
type SemaphoreStatus struct {
	Name string
	// Permits is the count recorded at PermitsKey(Name); 0 when none is
	// (no acquisition has run yet).
	Permits int
	// Holders are the live leases on its permits, each with its end
	// (ExpiresAt) and who holds it (Identity, with WithIdentity), in the
	// order of the permits. After a shrink (Resize), permits past the
	// recorded count are read too, while they live.
	Holders []KeyStatus
	// Foreign are the permit keys that hold something that is not a lock
	// value (H7): acquisitions leave them untouched and skip them.
	Foreign []string
	// Waiters is how many Acquire calls wait for a permit: the length of
	// the semaphore's one queue (semwait.go), or, for waits that stand in
	// every permit's own queue (a Locker that does not queue: they are
	// listed there to be woken), the longest of those.
	Waiters int64
}

// pastCountBatch is how many permits past the counts Status reads at a time,
// looking for those a shrink left live.
const pastCountBatch = 16

// Status reads the semaphore's count, its live holders and its waiters,
// writing nothing: the permits of the recorded count and of this client's,
// whichever is more, in one round trip, and past them while it finds keys.
func (s *Semaphore) Status(ctx context.Context) (SemaphoreStatus, error) {
	status := SemaphoreStatus{Name: s.name}
	key := PermitsKey(s.name)
	var get *redis.StringCmd
	var queued *redis.IntCmd
	_, _ = s.locker.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		get, queued = pipe.Get(ctx, key), pipe.ZCard(ctx, s.queue())
		return nil
	})
	status.Waiters = queued.Val() // 0 when it cannot be read: not a sorted set
	count, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
	case isWrongType(err):
		return SemaphoreStatus{}, fmt.Errorf("%w: semaphore %q: its count at %s is not a string", ErrNotLockValue, s.name, key)
	case err != nil:
		return SemaphoreStatus{}, fmt.Errorf("setnxlock: status of semaphore %q: %w", s.name, err)
	default:
		if status.Permits, err = parseCount(count); err != nil {
			return SemaphoreStatus{}, fmt.Errorf("%w: semaphore %q: its count at %s is %q, not a number of permits", ErrNotLockValue, s.name, key, count)
		}
	}
	// The permits of the counts, then, in batches, any past them that a
	// shrink left live, until a batch finds none.
	now := s.locker.cfg.clock.Now()
	counted := max(status.Permits, s.Permits())
	for from, to := 0, counted; ; from, to = to, to+pastCountBatch {
		reads := make([]statusRead, 0, to-from)
		_, _ = s.locker.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := from; i < to; i++ {
				reads = append(reads, readStatus(ctx, pipe, PermitKey(s.name, i)))
			}
			return nil
		})
		found := false
		for _, read := range reads {
			permit, err := read.status(now, s.locker.takeableAt)
			if err != nil {
				return SemaphoreStatus{}, fmt.Errorf("setnxlock: status of semaphore %q: %w", s.name, err)
			}
			switch {
			case permit.Foreign:
				status.Foreign = append(status.Foreign, permit.Key)
			case permit.Held:
				status.Holders = append(status.Holders, permit)
			}
			found = found || permit.Exists
			status.Waiters = max(status.Waiters, permit.Waiters)
		}
		if !found && from >= counted {
			break
		}
	}
	return status, nil
}
