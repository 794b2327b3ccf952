package setnxlock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// RWLockStatus is what a read/write lock's keys hold, read without
// writing anything (RWLock.Status).
type RWLockStatus struct {
	Name string
	// Writer is the writer key's status: Held while a writer holds it (or
	// drains the readers before it), Waiters the readers and writers
	// waiting in its queue.
	Writer KeyStatus
	// Readers are the listed readers whose leases are live, each with its
	// end (ExpiresAt) and who holds it (Identity, with WithIdentity).
	Readers []KeyStatus
	// Foreign are the listed reader keys that hold something that is not
	// a lock value (H7): writers leave them untouched and wait for them.
	Foreign []string
}

// Status reads the writer key, its queue and the listed readers, writing
// nothing (readers that crashed are pruned by writers, not here), in two
// round trips.
func (rw *RWLock) Status(ctx context.Context) (RWLockStatus, error) {
	l := rw.locker
	status := RWLockStatus{Name: rw.name}
	var writer statusRead
	var ids *redis.StringSliceCmd
	_, _ = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		writer = readStatus(ctx, pipe, WriterKey(rw.name))
		ids = pipe.SMembers(ctx, ReadersKey(rw.name))
		return nil
	})
	now := l.cfg.clock.Now()
	var err error
	if status.Writer, err = writer.status(now, l.takeableAt); err != nil {
		return RWLockStatus{}, err
	}
	listed, err := ids.Result()
	if isWrongType(err) {
		return RWLockStatus{}, fmt.Errorf("%w: read/write lock %q: %s is not a set", ErrNotLockValue, rw.name, ReadersKey(rw.name))
	}
	if err != nil {
		return RWLockStatus{}, fmt.Errorf("setnxlock: status of read/write lock %q: %w", rw.name, err)
	}
	if len(listed) == 0 {
		return status, nil
	}
	reads := make([]statusRead, len(listed))
	_, _ = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, id := range listed {
			reads[i] = readStatus(ctx, pipe, ReaderKey(rw.name, id))
		}
		return nil
	})
	now = l.cfg.clock.Now()
	for _, read := range reads {
		reader, err := read.status(now, l.takeableAt)
		switch {
		case err != nil:
			return RWLockStatus{}, fmt.Errorf("setnxlock: status of read/write lock %q: %w", rw.name, err)
		case reader.Foreign:
			status.Foreign = append(status.Foreign, reader.Key)
		case reader.Held:
			status.Readers = append(status.Readers, reader)
		}
	}
	return status, nil
}
