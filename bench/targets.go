package main

import (
	"fmt"
	"strings"
)

// verdict is one target of issue 6, computed from the results.
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

// targets computes every target of issue 6 from the results; nothing is
// taken on trust.
func (r *report) targets() []verdict {
	var out []verdict
	ratio := func(target, caseID, lib, base string, min float64) {
		v := verdict{target: target, required: fmt.Sprintf("≥ %.2f×", min), status: statusNotMeasured, measured: dash}
		a, b := r.rs.get(caseID, lib), r.rs.get(caseID, base)
		if a.ok() && b.ok() {
			q := a.rate() / b.rate()
			v.measured = fmt.Sprintf("%.2f× (%s vs %s cycles/s)", q, fmtCount(a.rate()), fmtCount(b.rate()))
			v.status = judge(q >= min)
		}
		out = append(out, v)
	}
	ratio("uncontended: setnxlock vs the raw SETNX+DEL floor", "uncontended", nameSetnx, nameRaw, 0.95)
	ratio("uncontended: setnxlock WithoutScripts vs the raw floor", "uncontended", nameNoScripts, nameRaw, 0.65)
	ratio("8 workers × 1 ms hold: setnxlock vs sync.Mutex", "w8-hold1ms", nameSetnx, nameMutex, 0.9)

	cmds := verdict{target: "8 workers × 1 ms hold: setnxlock commands/acquisition vs bsm/redislock's",
		required: "≤ 0.50×", status: statusNotMeasured, measured: dash}
	if a, b := r.rs.get("w8-hold1ms", nameSetnx), r.rs.get("w8-hold1ms", nameBsm); a.ok() && b.ok() && b.commandsPerAcquisition() > 0 {
		q := a.commandsPerAcquisition() / b.commandsPerAcquisition()
		cmds.measured = fmt.Sprintf("%.2f× (%s vs %s)", q, fmtFloat(a.commandsPerAcquisition()), fmtFloat(b.commandsPerAcquisition()))
		cmds.status = judge(q <= 0.5)
	}
	out = append(out, cmds)

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
				mine, theirs := percentile(own.handoffs, 50), percentile(other.handoffs, 50)
				won = mine < theirs
				cells = append(cells, fmt.Sprintf("%s vs %s %s", fmtDur(mine), shortPeer(peer), fmtDur(theirs)))
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
