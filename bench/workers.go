package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/setnxlock/setnxlock"
)

// worker is one goroutine's handle on a lock. Every worker has its own
// client and locker, like a separate process would, except in the shared
// cases, where all of a case's workers use one client and one locker.
type worker interface {
	// acquire blocks until the worker holds key or ctx ends.
	acquire(ctx context.Context, key string) error
	// release gives up the lock taken by the last acquire.
	release(ctx context.Context) error
	// leaseEnd is when the lease taken by the last acquire ends: the
	// earliest instant the protocol lets a next holder in.
	leaseEnd() time.Time
}

// locker is one contender's lock client over one Redis client: every
// worker it makes shares it.
type locker struct {
	newWorker func() worker // a handle for one more goroutine
	close     func() error  // stops the locker's own goroutines, if any; never closes the Redis client
}

// library is one contender: a way to make lockers, and the cases it runs in.
type library struct {
	name       string                                                        // as printed in tables
	config     string                                                        // how it is configured, for the report
	redis      bool                                                          // talks to Redis (false: the in-process ceiling, whose workers always share one lock)
	contended  bool                                                          // runs the multi-worker cases, the shared ones included
	solo       bool                                                          // runs the uncontended case
	crash      bool                                                          // runs the crash-recovery case
	newLocker  func(client *redis.Client, ttl time.Duration) (locker, error) // client is nil unless redis; nil: no lock cases
	shortLabel string                                                        // for the chart's x axis
	// newSemaphore, when set, makes lockers whose workers take permits of
	// one semaphore of permits, the key naming it: the semaphore case.
	newSemaphore func(client *redis.Client, ttl time.Duration, permits int) (locker, error)
	// newRWLock, when set, makes lockers whose workers read or write one
	// read/write lock, the key naming it, writing writePercent of their
	// cycles: the read/write case.
	newRWLock func(client *redis.Client, ttl time.Duration, writePercent int) (locker, error)
}

// keyPart is the library's name as a piece of a Redis key.
func (l *library) keyPart() string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '/' {
			return '-'
		}
		return r
	}, l.name)
}

// newClient is every locker's client: go-redis defaults, with its writes
// to the server counted.
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Dialer: countingDial})
}

// noClose is the close of a locker that has nothing of its own to stop.
func noClose() error { return nil }

// rawWorker is the floor: the classic SETNX, polled every retry delay, and
// a bare DEL. It has no lease, no token and no safety: it is what the
// commands alone cost.
type rawWorker struct {
	client *redis.Client
	retry  time.Duration
	key    string
	timer  *time.Timer
}

// rawLocker makes rawWorkers over client; there is no locker to share but
// the client.
func rawLocker(client *redis.Client, retry time.Duration) locker {
	return locker{close: noClose, newWorker: func() worker {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return &rawWorker{client: client, retry: retry, timer: t}
	}}
}

func (w *rawWorker) acquire(ctx context.Context, key string) error {
	for {
		cmd := redis.NewIntCmd(ctx, "setnx", key, "1")
		if err := w.client.Process(ctx, cmd); err != nil {
			return err
		}
		if cmd.Val() == 1 {
			w.key = key
			return nil
		}
		w.timer.Reset(w.retry)
		select {
		case <-ctx.Done():
			w.timer.Stop()
			return ctx.Err()
		case <-w.timer.C:
		}
	}
}

func (w *rawWorker) release(ctx context.Context) error { return w.client.Del(ctx, w.key).Err() }
func (w *rawWorker) leaseEnd() time.Time               { return time.Time{} }

// setnxWorker locks with setnxlock's public API.
type setnxWorker struct {
	locker *setnxlock.Locker
	lock   *setnxlock.Lock
}

// setnxLocker is one setnxlock.Locker over client with the given TTL and
// options; its workers share it.
func setnxLocker(client *redis.Client, ttl time.Duration, opts ...setnxlock.Option) (locker, error) {
	l, err := setnxlock.New(client, append([]setnxlock.Option{setnxlock.WithTTL(ttl)}, opts...)...)
	if err != nil {
		return locker{}, err
	}
	return locker{close: l.Close, newWorker: func() worker { return &setnxWorker{locker: l} }}, nil
}

func (w *setnxWorker) acquire(ctx context.Context, key string) error {
	lock, err := w.locker.Acquire(ctx, key)
	w.lock = lock
	return err
}

func (w *setnxWorker) release(ctx context.Context) error {
	if w.lock == nil {
		return errors.New("release without a lock")
	}
	err := w.lock.Release(ctx)
	w.lock = nil
	return err
}

func (w *setnxWorker) leaseEnd() time.Time {
	if w.lock == nil {
		return time.Time{}
	}
	return w.lock.ExpiresAt()
}

// mutexWorker is the in-process ceiling: the same loop around a sync.Mutex
// shared by the case's workers, no Redis.
type mutexWorker struct{ mu *sync.Mutex }

func (w mutexWorker) acquire(context.Context, string) error { w.mu.Lock(); return nil }
func (w mutexWorker) release(context.Context) error         { w.mu.Unlock(); return nil }
func (w mutexWorker) leaseEnd() time.Time                   { return time.Time{} }

// libraries lists the contenders in table order. retry is the fixed retry
// delay every polling contender uses.
func libraries(retry time.Duration) []*library {
	setnx := func(opts ...setnxlock.Option) func(*redis.Client, time.Duration) (locker, error) {
		return func(client *redis.Client, ttl time.Duration) (locker, error) {
			return setnxLocker(client, ttl, opts...)
		}
	}
	setnxSem := func(opts ...setnxlock.Option) func(*redis.Client, time.Duration, int) (locker, error) {
		return func(client *redis.Client, ttl time.Duration, permits int) (locker, error) {
			return setnxSemaphoreLocker(client, ttl, permits, opts...)
		}
	}
	setnxRW := func(opts ...setnxlock.Option) func(*redis.Client, time.Duration, int) (locker, error) {
		return func(client *redis.Client, ttl time.Duration, writePercent int) (locker, error) {
			return setnxRWLocker(client, ttl, writePercent, opts...)
		}
	}
	return []*library{
		{
			name: nameRaw, shortLabel: "raw", redis: true, solo: true, contended: true,
			config: "classic SETNX (typed command) then DEL; a refused SETNX is retried after the fixed retry delay",
			newLocker: func(client *redis.Client, _ time.Duration) (locker, error) {
				return rawLocker(client, retry), nil
			},
		},
		{
			name: nameSetnx, shortLabel: "setnxlock", redis: true, solo: true, contended: true, crash: true,
			config:       "default mode (scripts allowed), WithBackoff(retry, retry): the peers' retry settings; Semaphore.Acquire in the semaphore case",
			newLocker:    setnx(setnxlock.WithBackoff(retry, retry)),
			newSemaphore: setnxSem(setnxlock.WithBackoff(retry, retry)),
			newRWLock:    setnxRW(setnxlock.WithBackoff(retry, retry)),
		},
		{
			name: "setnxlock default backoff", shortLabel: "setnxlock\ndef.backoff", redis: true, contended: true, crash: true,
			config:    "default mode and the library's default backoff (DefaultMinBackoff..DefaultMaxBackoff)",
			newLocker: setnx(),
		},
		{
			name: nameNoScripts, shortLabel: "setnxlock\nno scripts", redis: true, solo: true, contended: true, crash: true,
			config:       "WithoutScripts(), WithBackoff(retry, retry)",
			newLocker:    setnx(setnxlock.WithoutScripts(), setnxlock.WithBackoff(retry, retry)),
			newSemaphore: setnxSem(setnxlock.WithoutScripts(), setnxlock.WithBackoff(retry, retry)),
			newRWLock:    setnxRW(setnxlock.WithoutScripts(), setnxlock.WithBackoff(retry, retry)),
		},
		{
			name: nameBsm, shortLabel: "bsm/\nredislock", redis: true, solo: true, contended: true, crash: true,
			config: "Obtain with RetryStrategy LinearBackoff(retry); the shared case shares one redislock.Client",
			newLocker: func(client *redis.Client, ttl time.Duration) (locker, error) {
				return bsmLocker(client, ttl, retry), nil
			},
		},
		{
			name: nameRedsync, shortLabel: "redsync", redis: true, solo: true, contended: true, crash: true,
			config: "one goredis/v9 pool, WithExpiry(ttl), WithRetryDelay(retry), WithTries(MaxInt32); " +
				"the shared case shares one Redsync, a Mutex per worker",
			newLocker: func(client *redis.Client, ttl time.Duration) (locker, error) {
				return redsyncLocker(client, ttl, retry), nil
			},
		},
		{
			name: nameMutex, shortLabel: "sync.Mutex", contended: true,
			config: "one sync.Mutex shared by the case's workers, the same loop, no Redis",
			newLocker: func(*redis.Client, time.Duration) (locker, error) {
				mu := new(sync.Mutex)
				return locker{close: noClose, newWorker: func() worker { return mutexWorker{mu: mu} }}, nil
			},
		},
		{
			name: nameListSem, shortLabel: "Redis list\nBLPOP",
			redis: true, contended: true,
			config: "the semaphore case's Redis floor: a list of the free permits, BLPOP to take one, RPUSH to give it back; " +
				"no lease, no owner, no recovery (listsemaphore.go; the semaphore case only)",
			newSemaphore: listSemaphoreLocker,
		},
		{
			name: nameWeighted, shortLabel: "x/sync\nWeighted",
			config:       "one golang.org/x/sync/semaphore.Weighted of the case's permits shared by its workers, the same loop, no Redis (the semaphore case only)",
			newSemaphore: weightedLocker,
		},
		{
			name: nameRWMutex, shortLabel: "sync.\nRWMutex",
			config:    "one sync.RWMutex shared by the case's workers, the same loop and share of writes, no Redis (the read/write case only)",
			newRWLock: rwMutexLocker,
		},
	}
}
