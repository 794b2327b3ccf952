package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The report: what the program prints, the library names it uses, and
// the files it writes.

// Library names the report and the targets refer to.
const (
	nameRaw       = "raw SETNX+DEL"
	nameSetnx     = "setnxlock"
	nameNoScripts = "setnxlock WithoutScripts"
	nameBsm       = "bsm/redislock"
	nameRedsync   = "redsync"
	nameMutex     = "sync.Mutex"
	nameWeighted  = "x/sync semaphore.Weighted"
	nameListSem   = "Redis list semaphore"
	nameRWMutex   = "sync.RWMutex"
)

// report turns results into the stdout tables, BENCHMARKS.md and the chart.
type report struct {
	rs  *results
	env environment
	cfg config
}

func newReport(rs *results, env environment, cfg config) *report {
	return &report{rs: rs, env: env, cfg: cfg}
}

// docPath and chartPath are where write puts its files.
func docPath(dir string) string   { return filepath.Join(dir, "BENCHMARKS.md") }
func chartPath(dir string) string { return filepath.Join(dir, "benchmarks.png") }

// notes lists errors and mutual-exclusion violations.
func (r *report) notes() []string {
	var out []string
	for _, c := range r.rs.cases {
		for _, lib := range r.rs.libs {
			res := r.rs.get(c.id, lib.name)
			if res == nil {
				continue
			}
			if res.violations > 0 {
				out = append(out, fmt.Sprintf("%s, %s: MUTUAL EXCLUSION VIOLATED in %d cycles", c.title, lib.name, res.violations))
			}
			if res.errors > 0 || res.firstErr != nil {
				out = append(out, fmt.Sprintf("%s, %s: %d errors (first: %v)", c.title, lib.name, res.errors, res.firstErr))
			}
		}
	}
	return out
}

// text is what the program prints to stdout.
func (r *report) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nsetnxlock benchmarks: redis-server %s on loopback, %s, %d CPUs (GOMAXPROCS %d), %s; %d round(s) of %v per library and case\n",
		r.env.redis, r.env.goVersion, r.env.cpus, r.env.gomaxprocs, r.env.cpu, r.cfg.rounds, r.cfg.duration)
	fmt.Fprintf(&b, "round trip (RTT): %s; cycles/s is the median over the rounds\n\n", r.rttSummary())
	b.WriteString(r.throughputTable().text())
	fmt.Fprintf(&b, "\ncrash recovery (holder's lease %v, never released; recovery = lease end → next holder's acquire returns)\n\n", r.cfg.crashTTL)
	b.WriteString(r.crashTable().text())
	b.WriteString("\ntargets (issue 24)\n\n")
	if p := r.provisional(); p != "" {
		b.WriteString(p + "\n\n")
	}
	b.WriteString(r.targetTable().text())
	for _, n := range r.notes() {
		b.WriteString("\nnote: " + n)
	}
	if len(r.notes()) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// provisional is the caveat on verdicts judged on fewer rounds than issue
// 24 asks for, or "".
func (r *report) provisional() string {
	if r.cfg.rounds >= minTargetRounds {
		return ""
	}
	return fmt.Sprintf("Provisional: judged on %d round(s); issue 24 judges its targets on the median of ≥ %d rounds.",
		r.cfg.rounds, minTargetRounds)
}

// rttSummary describes the run's round-trip time and its spread over the
// rounds.
func (r *report) rttSummary() string {
	if len(r.rs.rtts) == 0 {
		return "not measured"
	}
	lo, hi := slices.Min(r.rs.rtts), slices.Max(r.rs.rtts)
	return fmt.Sprintf("%s (median PING; rounds %s–%s)", fmtDur(r.rs.rtt()), fmtDur(lo), fmtDur(hi))
}

// write puts BENCHMARKS.md and benchmarks.png into dir.
func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeChart(r.rs, chartPath(dir)); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return os.WriteFile(docPath(dir), []byte(r.markdown()), 0o644)
}
