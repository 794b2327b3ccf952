package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// caseSpec is one benchmark case.
type caseSpec struct {
	id      string // short, stable, for keys and flags
	title   string
	workers int
	hold    time.Duration
	shared  bool // the workers share one Redis client and one locker, as a service's goroutines do
	crash   bool
}

// cases lists the benchmark's cases in report order.
func cases() []caseSpec {
	return []caseSpec{
		{id: "uncontended", title: "uncontended, 1 worker", workers: 1},
		{id: "w8-hold0", title: "8 workers, 0 ms hold", workers: 8},
		{id: "w8-hold1ms", title: "8 workers, 1 ms hold", workers: 8, hold: time.Millisecond},
		{id: caseShared, title: "8 workers sharing one Locker, 1 ms hold", workers: 8, hold: time.Millisecond, shared: true},
		{id: "w32-hold0", title: "32 workers, 0 ms hold", workers: 32},
		{id: "w32-hold1ms", title: "32 workers, 1 ms hold", workers: 32, hold: time.Millisecond},
		{id: "crash", title: "crash recovery", workers: 2, crash: true},
	}
}

// caseShared is the id of the case whose workers share one client and
// one locker.
const caseShared = "w8-hold1ms-shared"

// runs reports whether lib takes part in c.
func (c caseSpec) runs(lib *library) bool {
	switch {
	case c.crash:
		return lib.crash
	case c.workers == 1:
		return lib.solo
	default:
		return lib.contended
	}
}

// record is one lock cycle, in nanoseconds since the run began: when the
// acquire call started and returned, and when the release call returned.
type record struct {
	start, acq, rel int64
	worker          int32
}

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

// errorBudget stops a run whose workers keep failing instead of spinning.
const errorBudget = 1000

// runThroughput runs lib's workers in loops of acquire, hold, release on
// one key for the configured duration.
func (h *harness) runThroughput(lib *library, c caseSpec, round int) (runResult, error) {
	workers, closeAll, err := h.newWorkers(lib, c.workers, c.shared, h.cfg.ttl)
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
				if holders.Add(1) > 1 {
					violations.Add(1)
				}
				n := count.Add(1) // inside the critical section: n is the lock order
				if c.hold > 0 {
					time.Sleep(c.hold)
				}
				holders.Add(-1)
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
	res.commands, res.serverCPU, err = h.serverStats(lib, cpuBefore)
	return res, err
}

// newWorkers makes n of lib's workers with the given lease: each over its
// own client and locker, or all over one when shared (always, for a
// library without Redis). closeAll stops the lockers and closes the
// clients.
func (h *harness) newWorkers(lib *library, n int, shared bool, ttl time.Duration) (workers []worker, closeAll func(), err error) {
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
			if l, err = lib.newLocker(client, ttl); err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("%s: new locker: %w", lib.name, err)
			}
			closers = append(closers, l.close)
		}
		workers[i] = l.newWorker()
	}
	return workers, closeAll, nil
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

// runCrash repeats, for the configured duration: a holder acquires a fresh
// key with the short crash TTL and never releases it; a waiter, with its
// own client, calls the blocking acquire at once. The recovery is the time
// from the holder's lease end to the waiter's acquire returning.
func (h *harness) runCrash(lib *library, c caseSpec, round int) (runResult, error) {
	pair, closeAll, err := h.newWorkers(lib, 2, false, h.cfg.crashTTL)
	if err != nil {
		return runResult{}, err
	}
	defer closeAll()
	holder, waiter := pair[0], pair[1]
	if err := h.warmUp(pair, fmt.Sprintf("bench.%s.%s.warm.r%d", c.id, lib.keyPart(), round)); err != nil {
		return runResult{}, fmt.Errorf("%s: warm-up: %w", lib.name, err)
	}
	samples := max(int(h.cfg.duration/h.cfg.crashTTL), minCrashSamples)
	keys := make([]string, samples)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench.%s.%s.r%d.%d", c.id, lib.keyPart(), round, i)
	}
	cpuBefore, err := h.resetStats(lib)
	if err != nil {
		return runResult{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*h.cfg.crashTTL+10*time.Second)
	defer cancel()

	res := runResult{waits: make([]time.Duration, 0, samples), handoffs: make([]time.Duration, 0, samples)}
	before, sent := mallocs(), writes.Load()
	base := time.Now()
	for _, key := range keys {
		if err := holder.acquire(ctx, key); err != nil {
			return res, fmt.Errorf("%s: holder: %w", lib.name, err)
		}
		end := holder.leaseEnd() // the holder now "crashes": it never releases
		asked := time.Now()
		if err := waiter.acquire(ctx, key); err != nil {
			return res, fmt.Errorf("%s: waiter: %w", lib.name, err)
		}
		got := time.Now()
		if err := waiter.release(context.Background()); err != nil {
			res.errors++
			if res.firstErr == nil {
				res.firstErr = err
			}
		}
		res.waits = append(res.waits, got.Sub(asked))
		res.handoffs = append(res.handoffs, got.Sub(end))
		res.cycles++
		res.acquisitions += 2
	}
	res.elapsed = time.Since(base)
	res.mallocs, res.roundTrips = mallocs()-before, writes.Load()-sent
	res.commands, res.serverCPU, err = h.serverStats(lib, cpuBefore)
	return res, err
}

// minCrashSamples is the fewest recoveries one crash run measures.
const minCrashSamples = 3

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

// resetStats zeroes the server's commandstats before a Redis run and
// returns its main-thread CPU time so far.
func (h *harness) resetStats(lib *library) (time.Duration, error) {
	if !lib.redis {
		return 0, nil
	}
	if err := h.admin.ConfigResetStat(context.Background()).Err(); err != nil {
		return 0, fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	info, err := h.admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	return parseServerCPU(info)
}

// serverStats reads the commandstats since the last reset and the server's
// main-thread CPU time since cpuBefore.
func (h *harness) serverStats(lib *library, cpuBefore time.Duration) (commandStats, time.Duration, error) {
	if !lib.redis {
		return nil, 0, nil
	}
	info, err := h.admin.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		return nil, 0, fmt.Errorf("INFO commandstats cpu: %w", err)
	}
	stats, err := parseCommandStats(info)
	if err != nil {
		return nil, 0, err
	}
	cpu, err := parseServerCPU(info)
	return stats, cpu - cpuBefore, err
}

// mallocs is the process's cumulative count of heap allocations.
func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// errNoSamples marks a run that completed no cycle.
var errNoSamples = errors.New("no cycle completed")
