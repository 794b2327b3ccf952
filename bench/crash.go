package main

import (
	"context"
	"fmt"
	"time"
)

// The crash-recovery case: a holder that never releases, a waiter that
// takes the key over once the lease ends.

// runCrash repeats, for the configured duration: a holder acquires a fresh
// key with the short crash TTL and never releases it; a waiter, with its
// own client, calls the blocking acquire at once. The recovery is the time
// from the holder's lease end to the waiter's acquire returning.
func (h *harness) runCrash(lib *library, c caseSpec, round int) (runResult, error) {
	pair, closeAll, err := h.newWorkers(lib, 2, false, h.cfg.crashTTL, caseSpec{})
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
