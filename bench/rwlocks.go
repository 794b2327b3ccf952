package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock"
)

// The read/write case's workers: setnxlock's RWLock, and its in-process
// ceiling, sync.RWMutex. The worker's key names the lock; a cycle reads
// it, or in writePercent of the cycles writes it, and gives it back.

// rwWorker is a worker of the read/write case, whose last acquire read or
// wrote: the harness checks that a writer held alone.
type rwWorker interface{ writing() bool }

// drawWrite draws whether the next cycle writes: writePercent in 100.
func drawWrite(writePercent int) bool { return rand.IntN(100) < writePercent }

// setnxRWWorker reads or writes with setnxlock's RWLock.
type setnxRWWorker struct {
	locker       *setnxlock.Locker
	writePercent int
	rw           *setnxlock.RWLock // of the key of the last acquire
	lock         *setnxlock.Lock
	write        bool
}

// setnxRWLocker is one setnxlock.Locker over client with the given TTL and
// options, whose workers read or write one read/write lock.
func setnxRWLocker(client *redis.Client, ttl time.Duration, writePercent int, opts ...setnxlock.Option) (locker, error) {
	l, err := setnxlock.New(client, append([]setnxlock.Option{setnxlock.WithTTL(ttl)}, opts...)...)
	if err != nil {
		return locker{}, err
	}
	return locker{close: l.Close, newWorker: func() worker { return &setnxRWWorker{locker: l, writePercent: writePercent} }}, nil
}

func (w *setnxRWWorker) acquire(ctx context.Context, key string) error {
	if w.rw == nil || w.rw.Name() != key {
		rw, err := w.locker.RWLock(key)
		if err != nil {
			return err
		}
		w.rw = rw
	}
	take := w.rw.RLock
	if w.write = drawWrite(w.writePercent); w.write {
		take = w.rw.Lock
	}
	lock, err := take(ctx)
	w.lock = lock
	return err
}

func (w *setnxRWWorker) release(ctx context.Context) error {
	if w.lock == nil {
		return errors.New("release without a lock")
	}
	err := w.lock.Release(ctx)
	w.lock = nil
	return err
}

func (w *setnxRWWorker) leaseEnd() time.Time {
	if w.lock == nil {
		return time.Time{}
	}
	return w.lock.ExpiresAt()
}

func (w *setnxRWWorker) writing() bool { return w.write }

// rwMutexWorker is the read/write case's in-process ceiling: one
// sync.RWMutex shared by the case's workers, read or written in the same
// share of cycles.
type rwMutexWorker struct {
	mu           *sync.RWMutex
	writePercent int
	write        bool
}

// rwMutexLocker makes the workers of one sync.RWMutex.
func rwMutexLocker(_ *redis.Client, _ time.Duration, writePercent int) (locker, error) {
	mu := new(sync.RWMutex)
	return locker{close: noClose, newWorker: func() worker { return &rwMutexWorker{mu: mu, writePercent: writePercent} }}, nil
}

func (w *rwMutexWorker) acquire(context.Context, string) error {
	if w.write = drawWrite(w.writePercent); w.write {
		w.mu.Lock()
	} else {
		w.mu.RLock()
	}
	return nil
}

func (w *rwMutexWorker) release(context.Context) error {
	if w.write {
		w.mu.Unlock()
	} else {
		w.mu.RUnlock()
	}
	return nil
}

func (w *rwMutexWorker) leaseEnd() time.Time { return time.Time{} }
func (w *rwMutexWorker) writing() bool       { return w.write }
