package main

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// excludedCommands are not the contenders' work: the benchmark's own
// CONFIG RESETSTAT and INFO, and go-redis's connection handshake (HELLO,
// CLIENT SETINFO), which a pool sends once per new connection.
var excludedCommands = map[string]bool{
	"info": true, "config|resetstat": true, "config|get": true, "config|set": true,
	"hello": true, "client|setinfo": true,
}

// parseCommandStats reads INFO commandstats into calls per command,
// leaving out excludedCommands. Redis counts commands that scripts run as
// well as the EVAL/EVALSHA that ran them.
func parseCommandStats(info string) (map[string]int64, error) {
	calls := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("commandstats: malformed line %q", line)
		}
		if excludedCommands[name] {
			continue
		}
		for field := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("commandstats: %q: %w", line, err)
				}
				calls[name] += n
			}
		}
	}
	return calls, sc.Err()
}

// total is the sum of calls over all commands.
func total(calls map[string]int64) int64 {
	var n int64
	for _, c := range calls {
		n += c
	}
	return n
}

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted by the
// nearest-rank method.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// result is everything measured for one library in one case, summed over
// the rounds.
type result struct {
	lib          *library
	spec         caseSpec
	runs         int
	cycles       int64
	acquisitions int64
	elapsed      time.Duration
	waits        []time.Duration // sorted once the rounds are done
	handoffs     []time.Duration // sorted once the rounds are done
	selfPairs    int
	pairs        int
	commands     map[string]int64
	roundTrips   int64
	mallocs      uint64
	errors       int64
	firstErr     error
	violations   int64
}

// add folds one run into the result.
func (r *result) add(run runResult) {
	r.runs++
	r.cycles += run.cycles
	r.acquisitions += run.acquisitions
	r.elapsed += run.elapsed
	r.waits = append(r.waits, run.waits...)
	r.handoffs = append(r.handoffs, run.handoffs...)
	r.selfPairs += run.selfPairs
	r.pairs += run.pairs
	if run.commands != nil {
		if r.commands == nil {
			r.commands = map[string]int64{}
		}
		for k, v := range run.commands {
			r.commands[k] += v
		}
	}
	r.roundTrips += run.roundTrips
	r.mallocs += run.mallocs
	r.errors += run.errors
	if r.firstErr == nil {
		r.firstErr = run.firstErr
	}
	r.violations += run.violations
}

// finish sorts the samples for percentiles.
func (r *result) finish() {
	slices.Sort(r.waits)
	slices.Sort(r.handoffs)
}

// ok reports whether the result has numbers to show.
func (r *result) ok() bool { return r != nil && r.cycles > 0 && r.elapsed > 0 }

// rate is cycles per second (crash: recoveries per second).
func (r *result) rate() float64 { return float64(r.cycles) / r.elapsed.Seconds() }

// commandsPerAcquisition is the Redis commands sent per successful
// acquisition, everything included: polling, release, scripts' inner calls.
func (r *result) commandsPerAcquisition() float64 {
	if r.acquisitions == 0 {
		return 0
	}
	return float64(total(r.commands)) / float64(r.acquisitions)
}

// roundTripsPerAcquisition is the workers' writes to the server per
// successful acquisition: each command, pipeline or transaction block sent.
func (r *result) roundTripsPerAcquisition() float64 {
	if r.acquisitions == 0 {
		return 0
	}
	return float64(r.roundTrips) / float64(r.acquisitions)
}

// allocsPerCycle is heap allocations per cycle (crash: per acquisition),
// the whole process counted.
func (r *result) allocsPerCycle() float64 {
	if r.spec.crash {
		return float64(r.mallocs) / float64(max(r.acquisitions, 1))
	}
	return float64(r.mallocs) / float64(max(r.cycles, 1))
}

// selfShare is the fraction of consecutive cycles taken by the same worker:
// near 1 the lock is handed to whoever just released it.
func (r *result) selfShare() float64 {
	if r.pairs == 0 {
		return 0
	}
	return float64(r.selfPairs) / float64(r.pairs)
}

// results is every result of a run, by case id and library name.
type results struct {
	cases []caseSpec
	libs  []*library
	by    map[string]*result
}

func newResults(cs []caseSpec, libs []*library) *results {
	return &results{cases: cs, libs: libs, by: map[string]*result{}}
}

// get returns the result of lib in case id, or nil.
func (rs *results) get(caseID, lib string) *result { return rs.by[caseID+"\x00"+lib] }

// add folds a run into its result.
func (rs *results) add(c caseSpec, lib *library, run runResult) {
	k := c.id + "\x00" + lib.name
	r := rs.by[k]
	if r == nil {
		r = &result{lib: lib, spec: c}
		rs.by[k] = r
	}
	r.add(run)
}
