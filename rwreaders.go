package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A read/write lock's readers as a writer finds them: the ids listed in
// ReadersKey(name), each the reader key ReaderKey(name, id).

// liveReaders counts the readers of the lock whose leases are live, and
// says when the earliest of them may end (its takeable instant, H4). A
// listed id whose key is gone is taken off the list. An expired reader
// key is deleted with its id by a watched compare-and-delete of exactly
// the value judged over (dropReader): were it only ignored, a late
// Refresh of its reader could renew it after this writer judged it over,
// and two would hold (H3). A reader key that holds no lock value is left
// untouched (H7) and reported: ErrNotLockValue.
func (rw *RWLock) liveReaders(ctx context.Context) (live int, until time.Time, err error) {
	l := rw.locker
	readers := ReadersKey(rw.name)
	ids, err := l.client.SMembers(ctx, readers).Result()
	switch {
	case isWrongType(err):
		return 0, time.Time{}, fmt.Errorf("%w: read/write lock %q: %s is not a set", ErrNotLockValue, rw.name, readers)
	case err != nil:
		return 0, time.Time{}, fmt.Errorf("setnxlock: read/write lock %q: readers: %w", rw.name, err)
	case len(ids) == 0:
		return 0, time.Time{}, nil
	}
	gets := make([]*redis.StringCmd, len(ids))
	_, _ = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, id := range ids {
			gets[i] = pipe.Get(ctx, ReaderKey(rw.name, id))
		}
		return nil
	})
	now := l.cfg.clock.Now()
	var gone []any
	var foreign []error
	for i, get := range gets {
		key := ReaderKey(rw.name, ids[i])
		current, found, err := stringReply(get)
		if err == nil && !found {
			gone = append(gone, ids[i])
			continue
		}
		var ends time.Time
		if err == nil {
			ends, err = heldUntil(current)
		}
		switch {
		case errors.Is(err, ErrNotLockValue):
			foreign = append(foreign, fmt.Errorf("setnxlock: reader key %q: %w", key, err))
			continue
		case err != nil:
			return 0, time.Time{}, fmt.Errorf("setnxlock: reader key %q: %w", key, err)
		}
		takeable := l.takeableAt(ends)
		if expired(takeable, now) {
			if deleted, err := rw.dropReader(ctx, key, ids[i], current); err == nil && deleted {
				continue
			}
			takeable = now // renewed or gone meanwhile, or not deleted: look again
		}
		live++
		if until.IsZero() || takeable.Before(until) {
			until = takeable
		}
	}
	if len(gone) > 0 {
		_ = l.client.SRem(ctx, readers, gone...).Err() // best effort: the next writer prunes them
	}
	if len(foreign) > 0 {
		return live, until, errors.Join(foreign...)
	}
	return live, until, nil
}

// dropReader deletes the reader key of id while it holds exactly value,
// and takes id off the readers' list with it, in one watched transaction
// (H1, H3: never a value it did not judge), within leaveTimeout even when
// ctx has ended.
func (rw *RWLock) dropReader(ctx context.Context, key, id, value string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	readers := ReadersKey(rw.name)
	return rw.locker.compareAndWrite(ctx, key, func(current string) bool { return current == value }, func(pipe redis.Pipeliner) {
		pipe.Del(ctx, key)
		pipe.SRem(ctx, readers, id)
	})
}
