package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The benchmark's cases, and what every run shares: the harness, the
// workers it makes and their warm-up.

// caseSpec is one benchmark case.
type caseSpec struct {
	id      string // short, stable, for keys and flags
	title   string
	workers int
	hold    time.Duration
	shared  bool // the workers share one Redis client and one locker, as a service's goroutines do
	crash   bool
	permits int // a semaphore case: the workers take permits of one semaphore of this many, not one lock
	// writePercent, in a read/write case, is the share of cycles that
	// write; the others read, side by side, one read/write lock.
	writePercent int
}

// cases lists the benchmark's cases in report order.
func cases() []caseSpec {
	return []caseSpec{
		{id: caseUncontended, title: "uncontended, 1 worker", workers: 1},
		{id: caseW8Hold0, title: "8 workers, 0 ms hold", workers: 8},
		{id: caseW8Hold1ms, title: "8 workers, 1 ms hold", workers: 8, hold: time.Millisecond},
		{id: caseShared, title: "8 workers sharing one Locker, 1 ms hold", workers: 8, hold: time.Millisecond, shared: true},
		{id: caseW32Hold0, title: "32 workers, 0 ms hold", workers: 32},
		{id: caseW32Hold1ms, title: "32 workers, 1 ms hold", workers: 32, hold: time.Millisecond},
		{id: caseSemaphore, title: "semaphore of 4 permits, 16 workers, 1 ms hold", workers: 16, hold: time.Millisecond, permits: 4},
		{id: caseRWLock, title: "read/write lock, 90% reads, 16 workers, 1 ms hold", workers: 16, hold: time.Millisecond, writePercent: 10},
		{id: caseCrash, title: "crash recovery", workers: 2, crash: true},
	}
}

// The case ids, as the -cases flag takes them and the targets name them.
const (
	caseUncontended = "uncontended"
	caseW8Hold0     = "w8-hold0"
	caseW8Hold1ms   = "w8-hold1ms"
	caseShared      = "w8-hold1ms-shared" // the workers share one client and one locker
	caseW32Hold0    = "w32-hold0"
	caseW32Hold1ms  = "w32-hold1ms"
	caseCrash       = "crash"
	caseSemaphore   = "sem4-w16-hold1ms"
	caseRWLock      = "rw90-w16-hold1ms"
)

// runs reports whether lib takes part in c.
func (c caseSpec) runs(lib *library) bool {
	switch {
	case c.writePercent > 0:
		return lib.newRWLock != nil
	case c.permits > 0:
		return lib.newSemaphore != nil
	case lib.newLocker == nil:
		return false
	case c.crash:
		return lib.crash
	case c.workers == 1:
		return lib.solo
	default:
		return lib.contended
	}
}

// ceiling is the name of the case's in-process ceiling: the same loop
// with no Redis, around sync.Mutex, in a semaphore case x/sync's
// semaphore.Weighted, in a read/write case sync.RWMutex.
func (c caseSpec) ceiling() string {
	switch {
	case c.writePercent > 0:
		return nameRWMutex
	case c.permits > 0:
		return nameWeighted
	}
	return nameMutex
}

// overlapping reports whether holders of the case may hold side by side
// (a semaphore's permits, a read/write lock's readers): then one entry
// after another's release is no handoff, and no peer takes part.
func (c caseSpec) overlapping() bool { return c.permits > 0 || c.writePercent > 0 }

// runResult is what one run of one library in one case measured.
type runResult struct {
	cycles       int64         // completed acquire+release cycles (crash: recoveries)
	acquisitions int64         // successful acquisitions, the denominator of commands
	elapsed      time.Duration // wall time of the measured window
	waits        []time.Duration
	handoffs     []time.Duration // contended: release → another worker's acquire; crash: lease end → takeover
	selfPairs    int             // consecutive cycles by the same worker
	pairs        int
	commands     commandStats
	serverCPU    time.Duration // the server's main-thread CPU time during the measured window
	roundTrips   int64         // writes by the workers' clients: commands, pipelines and MULTI/EXEC blocks
	mallocs      uint64
	errors       int64
	firstErr     error
	violations   int64 // cycles that saw another holder inside the critical section
}

// harness holds what every run shares: the server, an admin client that
// resets and reads commandstats, and the cycle buffer.
type harness struct {
	addr  string
	admin *redis.Client
	cfg   config
	buf   []record // reused by every run; allocated once, before any measuring
}

// newWorkers makes n of lib's workers with the given lease: each over its
// own client and locker, or all over one when shared (always, for a
// library without Redis); in a semaphore case (c.permits), workers that
// take permits of a semaphore of that many (library.newSemaphore), in a
// read/write case, readers and writers of one lock (library.newRWLock).
// closeAll stops the lockers and closes the clients.
func (h *harness) newWorkers(lib *library, n int, shared bool, ttl time.Duration, c caseSpec) (workers []worker, closeAll func(), err error) {
	var closers []func() error
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i]()
		}
	}
	shared = shared || !lib.redis
	workers = make([]worker, n)
	var l locker
	for i := range workers {
		if i == 0 || !shared {
			var client *redis.Client
			if lib.redis {
				client = newClient(h.addr)
				closers = append(closers, client.Close)
			}
			switch {
			case c.writePercent > 0:
				l, err = lib.newRWLock(client, ttl, c.writePercent)
			case c.permits > 0:
				l, err = lib.newSemaphore(client, ttl, c.permits)
			default:
				l, err = lib.newLocker(client, ttl)
			}
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("%s: new locker: %w", lib.name, err)
			}
			closers = append(closers, l.close)
		}
		workers[i] = l.newWorker()
	}
	return workers, closeAll, nil
}

// warmUp makes each worker take and give back the lock once, so that
// connections are open and scripts are loaded before anything is counted.
func (h *harness) warmUp(workers []worker, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, w := range workers {
		if err := w.acquire(ctx, key); err != nil {
			return err
		}
		if err := w.release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// errNoSamples marks a run that completed no cycle.
var errNoSamples = errors.New("no cycle completed")
