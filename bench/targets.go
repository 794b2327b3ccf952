package main

import (
	"fmt"
	"strings"
	"time"
)

// verdict is one target of issue 15, computed from the results.
type verdict struct {
	target   string
	measured string
	required string
	status   string // MET, NOT MET or NOT MEASURED
}

const (
	statusMet         = "MET"
	statusNotMet      = "NOT MET"
	statusNotMeasured = "NOT MEASURED"
)

// judge is MET when ok, NOT MET otherwise.
func judge(ok bool) string {
	if ok {
		return statusMet
	}
	return statusNotMet
}

// measure is one number of a result that a target bounds.
type measure struct {
	name string
	of   func(*result) float64
	text func(float64) string
}

// The measures the targets bound.
var (
	cyclesPerSecond = measure{"cycles/s", (*result).rate, fmtCount}
	waitP99         = measure{"wait p99", func(r *result) float64 { return float64(percentile(r.waits, 99)) }, fmtNanos}
	commandsPerAcq  = measure{"commands/acquisition", (*result).commandsPerAcquisition, fmtFloat}
	serverMicros    = measure{"server CPU µs/acquisition", (*result).serverMicrosPerAcquisition, fmtFloat}
	allocsPerCycle  = measure{"allocations/cycle", (*result).allocsPerCycle, fmtFloat}
	recoveryP50     = measure{"recovery p50", func(r *result) float64 { return float64(percentile(r.handoffs, 50)) }, fmtNanos}
)

// fmtNanos prints a duration held in a float64 of nanoseconds.
func fmtNanos(f float64) string { return fmtDur(time.Duration(f)) }

// bound is a target's inequality: the measure's ratio to a base row's, or
// its value when base is empty, at least or at most limit.
type bound struct {
	atMost bool
	limit  float64
}

// atLeast is the bound "≥ limit×".
func atLeast(limit float64) bound { return bound{limit: limit} }

// atMost is the bound "≤ limit×".
func atMost(limit float64) bound { return bound{atMost: true, limit: limit} }

// holds reports whether q satisfies the bound.
func (b bound) holds(q float64) bool {
	if b.atMost {
		return q <= b.limit
	}
	return q >= b.limit
}

// String is the bound as the required column shows it.
func (b bound) String() string {
	op := "≥"
	if b.atMost {
		op = "≤"
	}
	return fmt.Sprintf("%s %.2f×", op, b.limit)
}

// compare is the target that lib's m in case caseID, over base's m in the
// same case, satisfies b.
func (r *report) compare(caseID, lib string, m measure, base string, b bound) verdict {
	v := verdict{target: fmt.Sprintf("%s: %s, %s vs %s's", r.caseTitle(caseID), lib, m.name, shortPeer(base)),
		required: b.String(), status: statusNotMeasured, measured: dash}
	own, other := r.rs.get(caseID, lib), r.rs.get(caseID, base)
	if !own.ok() || !other.ok() {
		return v
	}
	x, y := m.of(own), m.of(other)
	if y <= 0 {
		return v
	}
	v.measured = fmt.Sprintf("%.2f× (%s vs %s)", x/y, m.text(x), m.text(y))
	v.status = judge(b.holds(x / y))
	return v
}

// handoffInRTTs is the target that lib's median handoff in case caseID is
// at most limit round trips.
func (r *report) handoffInRTTs(caseID, lib string, limit float64) verdict {
	v := verdict{target: fmt.Sprintf("%s: %s, handoff p50 in round trips", r.caseTitle(caseID), lib),
		required: fmt.Sprintf("≤ %.1f RTT", limit), status: statusNotMeasured, measured: dash}
	res, rtt := r.rs.get(caseID, lib), r.rs.rtt()
	if !res.ok() || len(res.handoffs) == 0 || rtt <= 0 {
		return v
	}
	q := handoffRTTs(res, rtt)
	v.measured = fmt.Sprintf("%.2f RTT (%s, RTT %s)", q, fmtDur(percentile(res.handoffs, 50)), fmtDur(rtt))
	v.status = judge(q <= limit)
	return v
}

// caseTitle is the title of the case with the given id, or the id.
func (r *report) caseTitle(id string) string {
	for _, c := range cases() {
		if c.id == id {
			return c.title
		}
	}
	return id
}

// targets computes every target of issue 15 from the results; nothing is
// taken on trust.
func (r *report) targets() []verdict {
	out := []verdict{
		r.compare("w8-hold1ms", nameSetnx, cyclesPerSecond, nameMutex, atLeast(0.92)),
		r.compare("w8-hold1ms", nameSetnx, waitP99, nameMutex, atMost(2)),
		r.compare(caseShared, nameSetnx, waitP99, nameMutex, atMost(2)),
		r.handoffInRTTs("w8-hold1ms", nameSetnx, 1.5),
	}
	for _, id := range []string{"w8-hold1ms", "w32-hold1ms"} {
		out = append(out,
			r.compare(id, nameNoScripts, cyclesPerSecond, nameMutex, atLeast(0.85)),
			r.compare(id, nameNoScripts, waitP99, nameMutex, atMost(3)),
			r.compare(id, nameNoScripts, commandsPerAcq, nameBsm, atMost(0.5)))
	}
	for _, id := range []string{"w8-hold0", "w32-hold0"} {
		out = append(out,
			r.compare(id, nameSetnx, cyclesPerSecond, nameBsm, atLeast(1)),
			r.compare(id, nameSetnx, waitP99, nameBsm, atMost(0.25)))
	}
	out = append(out,
		r.compare("uncontended", nameSetnx, cyclesPerSecond, nameBsm, atLeast(1)),
		r.compare("uncontended", nameSetnx, cyclesPerSecond, nameRedsync, atLeast(1)),
		r.compare("uncontended", nameSetnx, serverMicros, nameBsm, atMost(1)),
		r.compare("uncontended", nameSetnx, allocsPerCycle, nameBsm, atMost(1)),
		r.compare("crash", nameSetnx, recoveryP50, nameBsm, atMost(1)))
	return append(out, r.ahead()...)
}

// ahead is the target "setnxlock ahead of bsm/redislock and redsync in
// every case", one verdict per case and one for all of them: more cycles/s
// in the throughput cases, a lower median recovery in the crash case.
func (r *report) ahead() []verdict {
	const target = "setnxlock ahead of bsm/redislock and redsync"
	var out []verdict
	all := verdict{target: target + " in every case", required: "every case above", status: statusNotMeasured, measured: dash}
	var behind []string
	for _, c := range r.rs.cases {
		v := verdict{target: target + ": " + c.title, required: "more cycles/s", status: statusNotMeasured, measured: dash}
		if c.crash {
			v.required = "lower recovery p50"
		}
		own := r.rs.get(c.id, nameSetnx)
		var cells []string
		wins, compared := 0, 0
		for _, peer := range []string{nameBsm, nameRedsync} {
			other := r.rs.get(c.id, peer)
			if !own.ok() || !other.ok() {
				continue
			}
			compared++
			var won bool
			if c.crash {
				mine, theirs := recoveryP50.of(own), recoveryP50.of(other)
				won = mine < theirs
				cells = append(cells, fmt.Sprintf("%s vs %s %s", fmtNanos(mine), shortPeer(peer), fmtNanos(theirs)))
			} else {
				q := own.rate() / other.rate()
				won = q > 1
				cells = append(cells, fmt.Sprintf("%s %s's", fmtRatio(q), shortPeer(peer)))
			}
			if won {
				wins++
			} else {
				behind = append(behind, c.id+" vs "+shortPeer(peer))
			}
		}
		if compared == 0 {
			out = append(out, v)
			continue
		}
		v.measured = strings.Join(cells, ", ")
		v.status = judge(wins == compared && compared == 2)
		out = append(out, v)
	}
	measured := 0
	for _, v := range out {
		if v.status != statusNotMeasured {
			measured++
		}
	}
	switch {
	case measured == 0:
	case measured < len(out):
		all.status, all.measured = statusNotMet, "not every case measured"
	case len(behind) > 0:
		all.status, all.measured = statusNotMet, "behind in "+strings.Join(behind, ", ")
	default:
		all.status, all.measured = statusMet, "ahead in every case"
	}
	return append(out, all)
}

// shortPeer is a peer's name in the targets' detail.
func shortPeer(name string) string {
	if name == nameBsm {
		return "bsm"
	}
	return name
}

// targetTable renders the targets.
func (r *report) targetTable() table {
	t := table{header: []string{"target", "required", "measured", "verdict"}}
	for _, v := range r.targets() {
		t.rows = append(t.rows, []string{v.target, v.required, v.measured, v.status})
	}
	return t
}
