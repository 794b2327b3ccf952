package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The throughput cases: workers in loops of acquire, hold, release on one
// key (in a semaphore case, one semaphore's permits), each cycle recorded
// in lock order, and the waits and handoffs read from those records.

// record is one lock cycle, in nanoseconds since the run began: when the
// acquire call started and returned, and when the release call returned.
type record struct {
	start, acq, rel int64
	worker          int32
}

// errorBudget stops a run whose workers keep failing instead of spinning.
const errorBudget = 1000

// runThroughput runs lib's workers in loops of acquire, hold, release on
// one key for the configured duration.
func (h *harness) runThroughput(lib *library, c caseSpec, round int) (runResult, error) {
	workers, closeAll, err := h.newWorkers(lib, c.workers, c.shared, h.cfg.ttl, c)
	if err != nil {
		return runResult{}, err
	}
	defer closeAll()
	key := fmt.Sprintf("bench.%s.%s.r%d", c.id, lib.keyPart(), round) // no run meets another's leftovers
	if err := h.warmUp(workers, key); err != nil {
		return runResult{}, fmt.Errorf("%s: warm-up: %w", lib.name, err)
	}
	cpuBefore, err := h.resetStats(lib)
	if err != nil {
		return runResult{}, err
	}

	var (
		count, holders, violations, errs atomic.Int64
		stop                             atomic.Bool
		firstErr                         atomic.Value
		wg                               sync.WaitGroup
		begin                            = make(chan struct{})
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	releaseCtx := context.Background() // never cancelled: every lock taken is given back
	buf := h.buf
	holdersAllowed := int64(max(c.permits, 1)) // a semaphore's permits, or the lock's one holder
	var base time.Time
	for id, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			for !stop.Load() {
				start := time.Since(base)
				if err := w.acquire(ctx, key); err != nil {
					if ctx.Err() != nil {
						return
					}
					firstErr.CompareAndSwap(nil, err)
					if errs.Add(1) > errorBudget {
						return
					}
					continue
				}
				acq := time.Since(base)
				weight, allowed := c.holding(w, holdersAllowed)
				if holders.Add(weight) > allowed {
					violations.Add(1)
				}
				n := count.Add(1) // inside the critical section: n is the lock order (of a lock; a semaphore's entries)
				if c.hold > 0 {
					time.Sleep(c.hold)
				}
				holders.Add(-weight)
				err := w.release(releaseCtx)
				rel := time.Since(base)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					errs.Add(1)
				}
				if n <= int64(len(buf)) {
					buf[n-1] = record{start: int64(start), acq: int64(acq), rel: int64(rel), worker: int32(id)}
				}
			}
		}()
	}

	before, sent := mallocs(), writes.Load()
	base = time.Now()
	close(begin)
	time.Sleep(h.cfg.duration)
	stop.Store(true)
	cancel()
	wg.Wait()
	elapsed := time.Since(base)
	after := mallocs()

	res := runResult{
		cycles: count.Load(), acquisitions: count.Load(), elapsed: elapsed, roundTrips: writes.Load() - sent,
		mallocs: after - before, errors: errs.Load(), violations: violations.Load(),
	}
	if err, ok := firstErr.Load().(error); ok {
		res.firstErr = err
	}
	res.waits, res.handoffs, res.selfPairs, res.pairs = cycleStats(buf[:min(res.cycles, int64(len(buf)))])
	if c.overlapping() {
		// Holders of different permits, or readers, overlap: one entry
		// after another's release is no handoff.
		res.handoffs, res.selfPairs, res.pairs = nil, 0, 0
	}
	res.commands, res.serverCPU, err = h.serverStats(lib, cpuBefore)
	return res, err
}

// writerWeight is what a writer of a read/write case adds to the count
// of holders, and a reader 1: a writer beside anyone makes the count
// exceed writerWeight, and a reader beside a writer reach it.
const writerWeight = 1 << 32

// holding is what worker w, which just acquired, adds to the count of
// holders, and the most that count may then be: 1 and holdersAllowed,
// but in a read/write case a reader's 1 below writerWeight, a writer's
// writerWeight alone.
func (c caseSpec) holding(w worker, holdersAllowed int64) (weight, allowed int64) {
	rw, ok := w.(rwWorker)
	switch {
	case c.writePercent == 0 || !ok:
		return 1, holdersAllowed
	case rw.writing():
		return writerWeight, writerWeight
	}
	return 1, writerWeight - 1
}

// cycleStats turns the recorded prefix of cycles, in lock order, into acquire
// waits and handoffs: from a release returning to the next acquire
// returning, when that next acquire is another worker's.
func cycleStats(recs []record) (waits, handoffs []time.Duration, self, pairs int) {
	waits = make([]time.Duration, len(recs))
	for i, r := range recs {
		waits[i] = time.Duration(r.acq - r.start)
	}
	for i := 1; i < len(recs); i++ {
		pairs++
		if recs[i].worker == recs[i-1].worker {
			self++
			continue
		}
		handoffs = append(handoffs, time.Duration(recs[i].acq-recs[i-1].rel))
	}
	return waits, handoffs, self, pairs
}
