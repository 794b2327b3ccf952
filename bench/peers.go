package main

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// bsmWorker locks with github.com/bsm/redislock.
type bsmWorker struct {
	locker  *redislock.Client
	opts    *redislock.Options
	ttl     time.Duration
	lock    *redislock.Lock
	started time.Time
}

// bsmLocker is one redislock.Client over client; its workers share it.
func bsmLocker(client *redis.Client, ttl, retry time.Duration) locker {
	l := redislock.New(client)
	return locker{close: noClose, newWorker: func() worker {
		return &bsmWorker{locker: l, opts: &redislock.Options{RetryStrategy: redislock.LinearBackoff(retry)}, ttl: ttl}
	}}
}

func (w *bsmWorker) acquire(ctx context.Context, key string) error {
	w.started = time.Now()
	lock, err := w.locker.Obtain(ctx, key, w.ttl, w.opts)
	w.lock = lock
	return err
}

func (w *bsmWorker) release(ctx context.Context) error {
	if w.lock == nil {
		return errors.New("release without a lock")
	}
	err := w.lock.Release(ctx)
	w.lock = nil
	return err
}

// leaseEnd is the acquire call's start plus the TTL: the key's PX expiry
// cannot begin before the call was sent.
func (w *bsmWorker) leaseEnd() time.Time { return w.started.Add(w.ttl) }

// redsyncWorker locks with github.com/go-redsync/redsync/v4 over one
// go-redis v9 pool.
type redsyncWorker struct {
	rs      *redsync.Redsync
	ttl     time.Duration
	retry   time.Duration
	mutex   *redsync.Mutex
	key     string
	started time.Time
}

// redsyncLocker is one Redsync over one pool on client; its workers share
// it, each with its own Mutex.
func redsyncLocker(client *redis.Client, ttl, retry time.Duration) locker {
	rs := redsync.New(goredis.NewPool(client))
	return locker{close: noClose, newWorker: func() worker { return &redsyncWorker{rs: rs, ttl: ttl, retry: retry} }}
}

func (w *redsyncWorker) acquire(ctx context.Context, key string) error {
	if w.mutex == nil || w.key != key {
		w.mutex = w.rs.NewMutex(key,
			redsync.WithExpiry(w.ttl),
			redsync.WithRetryDelay(w.retry),
			redsync.WithTries(math.MaxInt32)) // the context, not a count, ends the wait
		w.key = key
	}
	w.started = time.Now()
	return w.mutex.LockContext(ctx)
}

func (w *redsyncWorker) release(ctx context.Context) error {
	ok, err := w.mutex.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock refused")
	}
	return err
}

// leaseEnd is the acquire call's start plus the TTL, as for bsmWorker.
func (w *redsyncWorker) leaseEnd() time.Time { return w.started.Add(w.ttl) }
