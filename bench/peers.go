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
	client  *redis.Client
	locker  *redislock.Client
	opts    *redislock.Options
	ttl     time.Duration
	lock    *redislock.Lock
	started time.Time
}

func newBsmWorker(addr string, ttl, retry time.Duration) *bsmWorker {
	client := newClient(addr)
	return &bsmWorker{
		client: client,
		locker: redislock.New(client),
		opts:   &redislock.Options{RetryStrategy: redislock.LinearBackoff(retry)},
		ttl:    ttl,
	}
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
func (w *bsmWorker) close() error        { return w.client.Close() }

// redsyncWorker locks with github.com/go-redsync/redsync/v4 over one
// go-redis v9 pool.
type redsyncWorker struct {
	client  *redis.Client
	rs      *redsync.Redsync
	ttl     time.Duration
	retry   time.Duration
	mutex   *redsync.Mutex
	key     string
	started time.Time
}

func newRedsyncWorker(addr string, ttl, retry time.Duration) *redsyncWorker {
	client := newClient(addr)
	return &redsyncWorker{client: client, rs: redsync.New(goredis.NewPool(client)), ttl: ttl, retry: retry}
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
func (w *redsyncWorker) close() error        { return w.client.Close() }
