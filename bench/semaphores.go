package main

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/setnxlock/setnxlock"
)

// The semaphore case's workers: setnxlock's Semaphore, and its in-process
// ceiling, x/sync's semaphore.Weighted. The worker's key names the
// semaphore; a cycle takes one permit and gives it back.

// setnxSemWorker takes permits with setnxlock's Semaphore.Acquire.
type setnxSemWorker struct {
	locker  *setnxlock.Locker
	permits int
	sem     *setnxlock.Semaphore // of the key of the last acquire
	lock    *setnxlock.Lock
}

// setnxSemaphoreLocker is one setnxlock.Locker over client with the given
// TTL and options, whose workers take permits of a semaphore of permits.
func setnxSemaphoreLocker(client *redis.Client, ttl time.Duration, permits int, opts ...setnxlock.Option) (locker, error) {
	l, err := setnxlock.New(client, append([]setnxlock.Option{setnxlock.WithTTL(ttl)}, opts...)...)
	if err != nil {
		return locker{}, err
	}
	return locker{close: l.Close, newWorker: func() worker { return &setnxSemWorker{locker: l, permits: permits} }}, nil
}

func (w *setnxSemWorker) acquire(ctx context.Context, key string) error {
	if w.sem == nil || w.sem.Name() != key {
		sem, err := w.locker.Semaphore(key, w.permits)
		if err != nil {
			return err
		}
		w.sem = sem
	}
	lock, err := w.sem.Acquire(ctx)
	w.lock = lock
	return err
}

func (w *setnxSemWorker) release(ctx context.Context) error {
	if w.lock == nil {
		return errors.New("release without a permit")
	}
	err := w.lock.Release(ctx)
	w.lock = nil
	return err
}

func (w *setnxSemWorker) leaseEnd() time.Time {
	if w.lock == nil {
		return time.Time{}
	}
	return w.lock.ExpiresAt()
}

// weightedWorker is the semaphore case's in-process ceiling: one permit
// (weight 1) of a semaphore.Weighted shared by the case's workers.
type weightedWorker struct{ sem *semaphore.Weighted }

// weightedLocker makes the workers of one semaphore.Weighted of permits.
func weightedLocker(_ *redis.Client, _ time.Duration, permits int) (locker, error) {
	sem := semaphore.NewWeighted(int64(permits))
	return locker{close: noClose, newWorker: func() worker { return weightedWorker{sem: sem} }}, nil
}

func (w weightedWorker) acquire(ctx context.Context, _ string) error { return w.sem.Acquire(ctx, 1) }
func (w weightedWorker) release(context.Context) error               { w.sem.Release(1); return nil }
func (w weightedWorker) leaseEnd() time.Time                         { return time.Time{} }
