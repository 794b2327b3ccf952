package main

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat"
)

// excludedCommands are not the contenders' work: the benchmark's own
// CONFIG RESETSTAT and INFO, and go-redis's connection handshake (HELLO,
// CLIENT SETINFO), which a pool sends once per new connection.
var excludedCommands = map[string]bool{
	"info": true, "config|resetstat": true, "config|get": true, "config|set": true,
	"hello": true, "client|setinfo": true,
}

// commandStat is one command's line of INFO commandstats: how often it
// ran and the server's microseconds spent running it.
type commandStat struct{ calls, usec int64 }

// commandStats is INFO commandstats by command name.
type commandStats map[string]commandStat

// parseCommandStats reads INFO commandstats, leaving out excludedCommands.
// Redis counts the commands that scripts run as well as the EVAL/EVALSHA
// that ran them, in calls and in usec alike: a script's usec already
// includes its inner commands' usec.
func parseCommandStats(info string) (commandStats, error) {
	stats := commandStats{}
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
		st := stats[name]
		for field := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(field, "=")
			var into *int64
			switch k {
			case "calls":
				into = &st.calls
			case "usec":
				into = &st.usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("commandstats: %q: %w", line, err)
			}
			*into += n
		}
		stats[name] = st
	}
	return stats, sc.Err()
}

// add folds other into s.
func (s commandStats) add(other commandStats) {
	for name, st := range other {
		sum := s[name]
		sum.calls += st.calls
		sum.usec += st.usec
		s[name] = sum
	}
}

// calls is the sum of calls over all commands.
func (s commandStats) calls() int64 {
	var n int64
	for _, st := range s {
		n += st.calls
	}
	return n
}

// usec is the sum of usec over all commands, the commands scripts ran
// counted in their script's usec and again in their own.
func (s commandStats) usec() int64 {
	var n int64
	for _, st := range s {
		n += st.usec
	}
	return n
}

// infoField returns the value of the field name in an INFO reply.
func infoField(info, name string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

// parseServerCPU reads the CPU time of the server's main thread, user and
// system, from INFO cpu: the thread that parses, runs and answers every
// command when I/O threads are off, as they are by default.
func parseServerCPU(info string) (time.Duration, error) {
	var sum time.Duration
	for _, name := range []string{"used_cpu_user_main_thread", "used_cpu_sys_main_thread"} {
		v, ok := infoField(info, name)
		if !ok {
			return 0, fmt.Errorf("INFO cpu: no %s", name)
		}
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s: %w", name, err)
		}
		sum += time.Duration(secs * float64(time.Second))
	}
	return sum, nil
}

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
