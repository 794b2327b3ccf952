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

// worker is one contender's handle on a lock, with its own client: the
// benchmark gives every worker one, like separate processes would have.
type worker interface {
	// acquire blocks until the worker holds key or ctx ends.
	acquire(ctx context.Context, key string) error
	// release gives up the lock taken by the last acquire.
	release(ctx context.Context) error
	// leaseEnd is when the lease taken by the last acquire ends: the
	// earliest instant the protocol lets a next holder in.
	leaseEnd() time.Time
	// close releases the worker's client.
	close() error
}

// library is one contender: a way to make workers, and the cases it runs in.
type library struct {
	name       string // as printed in tables
	config     string // how it is configured, for the report
	redis      bool   // talks to Redis (false: the in-process ceiling)
	contended  bool   // runs the multi-worker cases
	solo       bool   // runs the uncontended case
	crash      bool   // runs the crash-recovery case
	newShared  func() any
	newWorker  func(addr string, ttl time.Duration, shared any) (worker, error)
	shortLabel string // for the chart's x axis
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

// newClient is every worker's client: go-redis defaults, one per worker,
// with its writes to the server counted.
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Dialer: countingDial})
}

// rawWorker is the floor: the classic SETNX, polled every retry delay, and
// a bare DEL. It has no lease, no token and no safety: it is what the
// commands alone cost.
type rawWorker struct {
	client *redis.Client
	retry  time.Duration
	key    string
	timer  *time.Timer
}

func newRawWorker(addr string, retry time.Duration) *rawWorker {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &rawWorker{client: newClient(addr), retry: retry, timer: t}
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
func (w *rawWorker) close() error                      { return w.client.Close() }

// setnxWorker locks with setnxlock's public API.
type setnxWorker struct {
	client *redis.Client
	locker *setnxlock.Locker
	lock   *setnxlock.Lock
}

func newSetnxWorker(addr string, opts ...setnxlock.Option) (*setnxWorker, error) {
	client := newClient(addr)
	locker, err := setnxlock.New(client, opts...)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &setnxWorker{client: client, locker: locker}, nil
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

func (w *setnxWorker) close() error { return w.client.Close() }

// mutexWorker is the in-process ceiling: the same loop around a sync.Mutex
// shared by the case's workers, no Redis.
type mutexWorker struct{ mu *sync.Mutex }

func (w mutexWorker) acquire(context.Context, string) error { w.mu.Lock(); return nil }
func (w mutexWorker) release(context.Context) error         { w.mu.Unlock(); return nil }
func (w mutexWorker) leaseEnd() time.Time                   { return time.Time{} }
func (w mutexWorker) close() error                          { return nil }

// libraries lists the contenders in table order. retry is the fixed retry
// delay every polling contender uses.
func libraries(retry time.Duration) []*library {
	setnx := func(opts ...setnxlock.Option) func(string, time.Duration, any) (worker, error) {
		return func(addr string, ttl time.Duration, _ any) (worker, error) {
			return newSetnxWorker(addr, append([]setnxlock.Option{setnxlock.WithTTL(ttl)}, opts...)...)
		}
	}
	return []*library{
		{
			name: "raw SETNX+DEL", shortLabel: "raw", redis: true, solo: true, contended: true,
			config: "classic SETNX (typed command) then DEL; a refused SETNX is retried after the fixed retry delay",
			newWorker: func(addr string, _ time.Duration, _ any) (worker, error) {
				return newRawWorker(addr, retry), nil
			},
		},
		{
			name: "setnxlock", shortLabel: "setnxlock", redis: true, solo: true, contended: true, crash: true,
			config:    "default mode (scripts allowed), WithBackoff(retry, retry): the peers' retry settings",
			newWorker: setnx(setnxlock.WithBackoff(retry, retry)),
		},
		{
			name: "setnxlock default backoff", shortLabel: "setnxlock\ndef.backoff", redis: true, contended: true, crash: true,
			config:    "default mode and the library's default backoff (DefaultMinBackoff..DefaultMaxBackoff)",
			newWorker: setnx(),
		},
		{
			name: "setnxlock WithoutScripts", shortLabel: "setnxlock\nno scripts", redis: true, solo: true, contended: true, crash: true,
			config:    "WithoutScripts(), WithBackoff(retry, retry)",
			newWorker: setnx(setnxlock.WithoutScripts(), setnxlock.WithBackoff(retry, retry)),
		},
		{
			name: "bsm/redislock", shortLabel: "bsm/\nredislock", redis: true, solo: true, contended: true, crash: true,
			config: "Obtain with RetryStrategy LinearBackoff(retry)",
			newWorker: func(addr string, ttl time.Duration, _ any) (worker, error) {
				return newBsmWorker(addr, ttl, retry), nil
			},
		},
		{
			name: "redsync", shortLabel: "redsync", redis: true, solo: true, contended: true, crash: true,
			config: "one goredis/v9 pool, WithExpiry(ttl), WithRetryDelay(retry), WithTries(MaxInt32)",
			newWorker: func(addr string, ttl time.Duration, _ any) (worker, error) {
				return newRedsyncWorker(addr, ttl, retry), nil
			},
		},
		{
			name: "sync.Mutex", shortLabel: "sync.Mutex", contended: true,
			config:    "one sync.Mutex shared by the case's workers, the same loop, no Redis",
			newShared: func() any { return new(sync.Mutex) },
			newWorker: func(_ string, _ time.Duration, shared any) (worker, error) {
				return mutexWorker{mu: shared.(*sync.Mutex)}, nil
			},
		},
	}
}
