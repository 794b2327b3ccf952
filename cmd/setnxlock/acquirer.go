package main

import (
	"context"
	"errors"

	"github.com/setnxlock/setnxlock"
)

// acquirer is what run holds while its command runs: a lock key, or one
// permit of a semaphore (--permits). Either way what it returns is a
// *setnxlock.Lock, so everything after the acquisition — the lease kept,
// the command killed by the lease's end (H11), the release — is the same.
type acquirer interface {
	// TryAcquire makes one attempt; an error matching ErrNotAcquired
	// when the lock, or every permit, is held.
	TryAcquire(ctx context.Context) (*setnxlock.Lock, error)
	// Acquire waits until it gets the lock or a permit, or ctx ends.
	Acquire(ctx context.Context) (*setnxlock.Lock, error)
}

// lockKey is the acquirer of a plain run: the lock KEY.
type lockKey struct {
	locker *setnxlock.Locker
	key    string
}

func (k lockKey) TryAcquire(ctx context.Context) (*setnxlock.Lock, error) {
	return k.locker.TryAcquire(ctx, k.key)
}

func (k lockKey) Acquire(ctx context.Context) (*setnxlock.Lock, error) {
	return k.locker.Acquire(ctx, k.key)
}

// newAcquirer is run's acquirer: the semaphore KEY of opts.permits
// permits with --permits, else the lock KEY. It sends nothing to Redis; a
// semaphore name the library refuses (ErrInvalidArgument) is bad usage.
func newAcquirer(opts runOptions, locker *setnxlock.Locker) (acquirer, error) {
	if opts.permits == 0 {
		return lockKey{locker, opts.key}, nil
	}
	sem, err := locker.Semaphore(opts.key, opts.permits)
	if err != nil {
		return nil, usageIn("run", err)
	}
	return sem, nil
}

// allForeign says whether a failed acquisition failed because the key
// holds something that is not a lock value (H7), left alone, rather than
// because it is held. A lock's error then matches ErrNotLockValue alone. A
// semaphore's matches ErrNotLockValue alone when its count is not a
// number; when permit keys are foreign it matches ErrNotAcquired too,
// whether every permit key is foreign or the others are held, so the
// permits are read (Status, writing nothing, within inspectTimeout) to
// tell them apart.
func allForeign(a acquirer, err error) bool {
	if !errors.Is(err, setnxlock.ErrNotLockValue) {
		return false
	}
	if !errors.Is(err, setnxlock.ErrNotAcquired) {
		return true // a lock key's value, or a semaphore's count
	}
	sem, ok := a.(*setnxlock.Semaphore)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	status, statusErr := sem.Status(ctx)
	return statusErr == nil && len(status.Holders) == 0 && len(status.Foreign) > 0
}
