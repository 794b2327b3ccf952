package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The report's tables: throughput, crash recovery and the command mix.

// throughputTable is every contended and uncontended result.
func (r *report) throughputTable() table {
	t := table{
		header: []string{"case", "library", "cycles/s", "× raw", "× ceiling", "floor", "× floor", "wait p50", "wait p99",
			"handoff p50", "handoff p99", "handoff p50 (RTTs)", "same worker", "cmds/acq", "trips/acq", "srv µs/acq",
			"cmd µs/acq", "allocs/cycle"},
	}
	t.right = make([]bool, len(t.header))
	for i := 2; i < len(t.right); i++ {
		t.right[i] = true
	}
	rtt := r.rs.rtt()
	for _, c := range r.rs.cases {
		if c.crash {
			continue
		}
		raw, mutex := r.rs.get(c.id, nameRaw), r.rs.get(c.id, c.ceiling())
		floor := floorRate(c, rtt)
		for _, lib := range r.rs.libs {
			res := r.rs.get(c.id, lib.name)
			if res == nil {
				continue
			}
			if !res.ok() {
				row := []string{c.title, lib.name, "failed"}
				for len(row) < len(t.header) {
					row = append(row, dash)
				}
				t.rows = append(t.rows, row)
				continue
			}
			row := throughputRow(c, lib, res, raw, mutex, floor, rtt)
			t.rows = append(t.rows, row)
		}
	}
	return t
}

// throughputRow is the row of lib's result res in case c, which has
// numbers to show: raw's and mutex's results are the bases of its ratios,
// floor the case's floor and rtt the run's round trip.
func throughputRow(c caseSpec, lib *library, res, raw, mutex *result, floor float64, rtt time.Duration) []string {
	row := []string{c.title, lib.name, fmtCount(res.rate()), ratioTo(res, raw), ratioTo(res, mutex)}
	if lib.redis && floor > 0 {
		row = append(row, fmtCount(floor), fmtRatio(res.rate()/floor))
	} else {
		row = append(row, dash, dash)
	}
	row = append(row, fmtDur(percentile(res.waits, 50)), fmtDur(percentile(res.waits, 99)))
	if len(res.handoffs) > 0 {
		row = append(row, fmtDur(percentile(res.handoffs, 50)), fmtDur(percentile(res.handoffs, 99)))
	} else {
		row = append(row, dash, dash)
	}
	if len(res.handoffs) > 0 && lib.redis && rtt > 0 {
		row = append(row, fmtFloat(handoffRTTs(res, rtt)))
	} else {
		row = append(row, dash)
	}
	if c.workers > 1 && res.pairs > 0 {
		row = append(row, fmt.Sprintf("%.0f%%", 100*res.selfShare()))
	} else {
		row = append(row, dash)
	}
	if lib.redis {
		row = append(row, fmtFloat(res.commandsPerAcquisition()), fmtFloat(res.roundTripsPerAcquisition()),
			fmtFloat(res.serverMicrosPerAcquisition()), fmtFloat(res.commandMicrosPerAcquisition()))
	} else {
		row = append(row, dash, dash, dash, dash)
	}
	row = append(row, fmtFloat(res.allocsPerCycle()))
	return row
}

// handoffRTTs is res's median handoff in round trips.
func handoffRTTs(res *result, rtt time.Duration) float64 {
	return float64(percentile(res.handoffs, 50)) / float64(rtt)
}

// ratioTo is res's rate over base's, or a dash.
func ratioTo(res, base *result) string {
	if !base.ok() || res == base {
		if res == base && base.ok() {
			return "1.00×"
		}
		return dash
	}
	return fmtRatio(res.rate() / base.rate())
}

// crashTable is the crash-recovery results.
func (r *report) crashTable() table {
	t := table{
		header: []string{"library", "recovery p50", "recovery p99", "waiter's wait p50", "wait p99", "cmds/acq", "trips/acq", "allocs/acq", "recoveries"},
		right:  []bool{false, true, true, true, true, true, true, true, true},
	}
	for _, c := range r.rs.cases {
		if !c.crash {
			continue
		}
		for _, lib := range r.rs.libs {
			res := r.rs.get(c.id, lib.name)
			if res == nil {
				continue
			}
			if !res.ok() {
				t.rows = append(t.rows, []string{lib.name, "failed", dash, dash, dash, dash, dash, dash, dash})
				continue
			}
			t.rows = append(t.rows, []string{lib.name,
				fmtDur(percentile(res.handoffs, 50)), fmtDur(percentile(res.handoffs, 99)),
				fmtDur(percentile(res.waits, 50)), fmtDur(percentile(res.waits, 99)),
				fmtFloat(res.commandsPerAcquisition()), fmtFloat(res.roundTripsPerAcquisition()),
				fmtFloat(res.allocsPerCycle()), fmt.Sprint(res.cycles)})
		}
	}
	return t
}

// commandMixTable shows, for the given cases, which commands each Redis
// library sent per acquisition.
func (r *report) commandMixTable(caseIDs ...string) table {
	t := table{header: []string{"case", "library", "commands per acquisition"}}
	for _, c := range r.rs.cases {
		if !slices.Contains(caseIDs, c.id) {
			continue
		}
		for _, lib := range r.rs.libs {
			res := r.rs.get(c.id, lib.name)
			if !lib.redis || !res.ok() || res.acquisitions == 0 {
				continue
			}
			names := make([]string, 0, len(res.commands))
			for name, st := range res.commands {
				if st.calls > 0 {
					names = append(names, name)
				}
			}
			slices.SortFunc(names, func(a, b string) int {
				if d := res.commands[b].calls - res.commands[a].calls; d != 0 {
					return int(d)
				}
				return strings.Compare(a, b)
			})
			parts := make([]string, len(names))
			for i, name := range names {
				parts[i] = fmt.Sprintf("%s %.2f", strings.ToUpper(name), res.perAcquisition(float64(res.commands[name].calls)))
			}
			t.rows = append(t.rows, []string{c.title, lib.name, strings.Join(parts, ", ")})
		}
	}
	return t
}
