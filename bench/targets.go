package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// verdict is one target of issue 24, computed from the results.
type verdict struct {
	caseID   string // the case the target is judged in; "" for "ahead in every case"
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

// minTargetRounds is the fewest rounds issue 24 judges its targets on; a
// run of fewer still shows verdicts, marked provisional.
const minTargetRounds = 5

// judge is MET when ok, NOT MET otherwise.
func judge(ok bool) string {
	if ok {
		return statusMet
	}
	return statusNotMet
}

// measure is one number of a result that a target bounds. of returns the
// number and whether the run measured it at all: a measure that is
// missing (no samples, no command counts, no CPU reading) is never
// mistaken for a zero, which would meet every "at most" bound.
type measure struct {
	name string
	of   func(*result) (float64, bool)
	text func(float64) string
}

// The measures the targets bound.
var (
	cyclesPerSecond = measure{"cycles/s", func(r *result) (float64, bool) { return r.rate(), r.rate() > 0 }, fmtCount}
	waitP99         = measure{"wait p99", func(r *result) (float64, bool) {
		return float64(percentile(r.waits, 99)), len(r.waits) > 0
	}, fmtNanos}
	commandsPerAcq = measure{"commands/acquisition", func(r *result) (float64, bool) {
		return r.commandsPerAcquisition(), r.commands.calls() > 0 && r.acquisitions > 0
	}, fmtFloat}
	commandsPerCyc = measure{"commands/cycle", func(r *result) (float64, bool) {
		return r.commandsPerCycle(), r.commands.calls() > 0 && r.cycles > 0
	}, fmtFloat}
	serverMicros = measure{"server CPU µs/acquisition", func(r *result) (float64, bool) {
		return r.serverMicrosPerAcquisition(), r.serverCPU > 0 && r.acquisitions > 0
	}, fmtFloat}
	allocsPerCycle = measure{"allocations/cycle", func(r *result) (float64, bool) {
		return r.allocsPerCycle(), r.cycles > 0
	}, fmtFloat}
	recoveryP50 = measure{"recovery p50", func(r *result) (float64, bool) {
		return float64(percentile(r.handoffs, 50)), len(r.handoffs) > 0
	}, fmtNanos}
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
// same case, satisfies b. It is NOT MEASURED when either row is missing or
// failed, either lacks the measure, or base's is not positive.
func (r *report) compare(caseID, lib string, m measure, base string, b bound) verdict {
	v := verdict{caseID: caseID, target: fmt.Sprintf("%s: %s, %s vs %s's", r.caseTitle(caseID), lib, m.name, shortPeer(base)),
		required: b.String(), status: statusNotMeasured, measured: dash}
	own, other := r.rs.get(caseID, lib), r.rs.get(caseID, base)
	if !own.ok() || !other.ok() {
		return v
	}
	x, xok := m.of(own)
	y, yok := m.of(other)
	if !xok || !yok || y <= 0 {
		return v
	}
	v.measured = fmt.Sprintf("%.2f× (%s vs %s)", x/y, m.text(x), m.text(y))
	v.status = judge(b.holds(x / y))
	return v
}

// handoffInRTTs is the target that lib's median handoff in case caseID is
// at most limit round trips.
func (r *report) handoffInRTTs(caseID, lib string, limit float64) verdict {
	v := verdict{caseID: caseID, target: fmt.Sprintf("%s: %s, handoff p50 in round trips", r.caseTitle(caseID), lib),
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

// targets judges every target of issue 24's "Targets" section, in its
// order, from the results; nothing is taken on trust.
func (r *report) targets() []verdict {
	out := []verdict{
		r.compare(caseUncontended, nameSetnx, cyclesPerSecond, nameBsm, atLeast(1.05)),
		r.compare(caseUncontended, nameSetnx, cyclesPerSecond, nameRedsync, atLeast(1.05)),
		r.compare(caseUncontended, nameSetnx, serverMicros, nameBsm, atMost(0.9)),
		// commands per cycle (acquire + release) on both rows alike
		r.compare(caseUncontended, nameSetnx, commandsPerCyc, nameBsm, atMost(1)),
		r.compare(caseUncontended, nameSetnx, allocsPerCycle, nameBsm, atMost(1)),
	}
	for _, id := range []string{caseW8Hold1ms, caseShared} {
		out = append(out,
			r.compare(id, nameSetnx, cyclesPerSecond, nameMutex, atLeast(0.92)),
			r.compare(id, nameSetnx, waitP99, nameMutex, atMost(1.5)),
			r.handoffInRTTs(id, nameSetnx, 2))
	}
	for _, id := range []string{caseW8Hold0, caseW32Hold0} {
		out = append(out,
			r.compare(id, nameSetnx, cyclesPerSecond, nameBsm, atLeast(1)),
			r.compare(id, nameSetnx, waitP99, nameBsm, atMost(0.25)))
	}
	for _, id := range []string{caseW8Hold1ms, caseW32Hold1ms} {
		out = append(out,
			r.compare(id, nameNoScripts, cyclesPerSecond, nameMutex, atLeast(0.85)),
			r.compare(id, nameNoScripts, waitP99, nameMutex, atMost(2)),
			r.compare(id, nameNoScripts, commandsPerAcq, nameBsm, atMost(0.5)))
	}
	// issue 26: a semaphore's permits against the in-process semaphore
	out = append(out,
		r.compare(caseSemaphore, nameSetnx, cyclesPerSecond, nameWeighted, atLeast(0.85)),
		r.compare(caseSemaphore, nameSetnx, waitP99, nameWeighted, atMost(2)))
	// issue 27: a read/write lock, 90% reads, against sync.RWMutex;
	// provisional targets, the semaphore's, until measured
	out = append(out,
		r.compare(caseRWLock, nameSetnx, cyclesPerSecond, nameRWMutex, atLeast(0.85)),
		r.compare(caseRWLock, nameSetnx, waitP99, nameRWMutex, atMost(2)))
	out = append(out, r.compare(caseCrash, nameSetnx, recoveryP50, nameBsm, atMost(1)))
	return append(out, r.ahead()...)
}

// ahead is the target "setnxlock ahead of bsm/redislock and redsync in
// every case", one verdict per case of the benchmark (not only the cases
// this run selected) and one for all of them: more cycles/s in the
// throughput cases, a lower median recovery in the crash case. A case is
// NOT MET when setnxlock is behind either peer, NOT MEASURED when it is
// behind neither but a peer's or its own number is missing.
func (r *report) ahead() []verdict {
	const target = "setnxlock ahead of bsm/redislock and redsync"
	var statuses, behind []string
	var verdicts []verdict
	for _, c := range cases() {
		if c.overlapping() {
			continue // neither peer has a semaphore or a read/write lock
		}
		v := r.aheadIn(c, &behind)
		v.target = target + ": " + c.title
		verdicts = append(verdicts, v)
		statuses = append(statuses, v.status)
	}
	all := verdict{target: target + " in every case", required: "every case above", status: statusMet, measured: "ahead in every case"}
	switch {
	case len(behind) > 0:
		all.status, all.measured = statusNotMet, "behind in "+strings.Join(behind, ", ")
	case slices.Contains(statuses, statusNotMeasured):
		all.status, all.measured = statusNotMeasured, "not every case measured"
	}
	return append(verdicts, all)
}

// aheadIn is the "ahead" verdict of case c, its target left to the caller;
// it appends "case vs peer" to behind for each peer setnxlock is not ahead of.
func (r *report) aheadIn(c caseSpec, behind *[]string) verdict {
	m, required := cyclesPerSecond, "more cycles/s"
	if c.crash {
		m, required = recoveryP50, "lower recovery p50"
	}
	v := verdict{caseID: c.id, required: required, status: statusNotMeasured, measured: dash}
	own := r.rs.get(c.id, nameSetnx)
	var cells []string
	wins, lost := 0, false
	for _, peer := range []string{nameBsm, nameRedsync} {
		other := r.rs.get(c.id, peer)
		if !own.ok() || !other.ok() {
			continue
		}
		mine, mok := m.of(own)
		theirs, tok := m.of(other)
		if !mok || !tok || theirs <= 0 {
			continue
		}
		var won bool
		if c.crash {
			won = mine < theirs
			cells = append(cells, fmt.Sprintf("%s vs %s %s", fmtNanos(mine), shortPeer(peer), fmtNanos(theirs)))
		} else {
			won = mine > theirs
			cells = append(cells, fmt.Sprintf("%s %s's", fmtRatio(mine/theirs), shortPeer(peer)))
		}
		if won {
			wins++
		} else {
			lost = true
			*behind = append(*behind, c.id+" vs "+shortPeer(peer))
		}
	}
	if len(cells) > 0 {
		v.measured = strings.Join(cells, ", ")
	}
	switch {
	case lost:
		v.status = statusNotMet
	case wins == 2:
		v.status = statusMet
	}
	return v
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
