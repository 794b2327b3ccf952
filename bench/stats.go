package main

import (
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"
)

// Each library's results in each case over the rounds, and the
// statistics the report reads from them.

// median is the middle of xs, or the mean of the two middle values; xs is
// sorted in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted by the
// nearest-rank method (gonum's Empirical quantile), or 0 for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	xs := make([]float64, len(sorted))
	for i, d := range sorted {
		xs[i] = float64(d)
	}
	return time.Duration(stat.Quantile(p/100, stat.Empirical, xs, nil))
}

// result is everything measured for one library in one case over the
// rounds: counts summed, latency samples pooled, cycles/s the median of the
// rounds' cycles/s.
type result struct {
	lib          *library
	spec         caseSpec
	runs         int
	cycles       int64
	acquisitions int64
	elapsed      time.Duration
	rates        []float64       // each round's cycles/s
	waits        []time.Duration // sorted once the rounds are done
	handoffs     []time.Duration // sorted once the rounds are done
	selfPairs    int
	pairs        int
	commands     commandStats
	serverCPU    time.Duration // the server's main-thread CPU time during the runs
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
	if run.elapsed > 0 {
		r.rates = append(r.rates, float64(run.cycles)/run.elapsed.Seconds())
	} else {
		r.rates = append(r.rates, 0)
	}
	r.waits = append(r.waits, run.waits...)
	r.handoffs = append(r.handoffs, run.handoffs...)
	r.selfPairs += run.selfPairs
	r.pairs += run.pairs
	if run.commands != nil {
		if r.commands == nil {
			r.commands = commandStats{}
		}
		r.commands.add(run.commands)
	}
	r.serverCPU += run.serverCPU
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

// rate is the median over the rounds of each round's cycles per second
// (crash: recoveries per second).
func (r *result) rate() float64 { return median(r.rates) }

// perAcquisition is n divided by the successful acquisitions, or 0.
func (r *result) perAcquisition(n float64) float64 {
	if r.acquisitions == 0 {
		return 0
	}
	return n / float64(r.acquisitions)
}

// commandsPerAcquisition is the Redis commands sent per successful
// acquisition, everything included: polling, release, scripts' inner calls.
func (r *result) commandsPerAcquisition() float64 {
	return r.perAcquisition(float64(r.commands.calls()))
}

// commandsPerCycle is the Redis commands sent per completed cycle
// (acquire + hold + release), counted as commandsPerAcquisition counts
// them. In a throughput case every cycle is one acquisition, so it equals
// the cmds/acq column; in the crash case a cycle is two acquisitions.
func (r *result) commandsPerCycle() float64 {
	if r.cycles == 0 {
		return 0
	}
	return float64(r.commands.calls()) / float64(r.cycles)
}

// commandMicrosPerAcquisition is the usec of INFO commandstats per
// successful acquisition: the server's time running the commands, a
// script's inner commands counted twice (inside the script and on their
// own), parsing and network I/O not at all.
func (r *result) commandMicrosPerAcquisition() float64 {
	return r.perAcquisition(float64(r.commands.usec()))
}

// serverMicrosPerAcquisition is the server's main-thread CPU time, in µs,
// per successful acquisition: commands, scripts, parsing and socket I/O,
// each counted once.
func (r *result) serverMicrosPerAcquisition() float64 {
	return r.perAcquisition(float64(r.serverCPU) / float64(time.Microsecond))
}

// roundTripsPerAcquisition is the workers' writes to the server per
// successful acquisition: each command, pipeline or transaction block sent.
func (r *result) roundTripsPerAcquisition() float64 {
	return r.perAcquisition(float64(r.roundTrips))
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

// results is every result of a run, by case id and library name, and the
// round-trip time measured in each round.
type results struct {
	cases []caseSpec
	libs  []*library
	by    map[string]*result
	rtts  []time.Duration // one per round: the median of that round's PINGs
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

// rtt is the median over the rounds of each round's median PING round
// trip, or 0 when none was measured.
func (rs *results) rtt() time.Duration {
	xs := make([]float64, len(rs.rtts))
	for i, d := range rs.rtts {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}
