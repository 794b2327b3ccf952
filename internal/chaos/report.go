package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Summary is the line of a run that scripts read:
//
//	chaos: mode=<name> acquisitions=<n> faults=<n> violations=<n> recovered_p99=<dur> longest_free_wait=<dur>
func (r *Result) Summary() string {
	return fmt.Sprintf("chaos: mode=%s acquisitions=%d faults=%d violations=%d recovered_p99=%s longest_free_wait=%s",
		r.Config.Mode, r.Report.Acquisitions, r.Faults.Total(), len(r.Report.Violations),
		roundDuration(Percentile(r.Report.Recovered, 99)), roundDuration(Percentile(r.Report.FreeWaits, 100)))
}

// roundDuration keeps two or three significant digits.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	default:
		return d.Round(100 * time.Microsecond)
	}
}

// Details describes the run beyond the summary line.
func (r *Result) Details() string {
	var b strings.Builder
	c := r.Config
	line := func(format string, args ...any) {
		fmt.Fprintf(&b, "chaos: %s: "+format+"\n", append([]any{c.Mode}, args...)...)
	}
	line("seed=%d goroutines=%d procs=%d loops=%d keys=%d ttl=%s skew=%s margin=%s persistence=%t client-tags=%q",
		c.Seed, c.Goroutines, c.Procs, c.Loops, c.Keys, c.TTL, c.Skew, c.Margin, c.Persistence, c.ClientTags)
	line("%s elapsed; faults: %s", r.Elapsed.Round(time.Millisecond), strings.Join(r.Faults.parts(), " "))
	line("sections=%d h8-overran=%d writes=%d stale-writes-refused=%d releases=%v acquire-errors=%d",
		r.Report.Sections, r.Report.Overran, len(r.History.Ops), r.Stale, r.Releases, len(r.Fails))
	for i, f := range r.Fails {
		if i == 3 {
			break
		}
		line("  acquire error: %s", f)
	}
	rec := r.Report.Recovered
	line("crashed holders recovered=%d (unrecovered at the end: %d) p50=%s p99=%s max=%s bound=%s; recoveries a write in doubt may explain=%d",
		len(rec), r.Report.Unrecovered, roundDuration(Percentile(rec, 50)), roundDuration(Percentile(rec, 99)),
		roundDuration(Percentile(rec, 100)), c.recoveryBoundText(), r.Report.InDoubtRecoveries)
	fw := r.Report.FreeWaits
	line("free waits=%d p50=%s p99=%s max=%s (by %s/%d) bound=%s; waits a write in doubt may explain=%d; over the bound, explained by a late holder=%d, by a handoff nobody claimed=%d; free waits >= ttl: %d",
		len(fw), roundDuration(Percentile(fw, 50)), roundDuration(Percentile(fw, 99)), roundDuration(Percentile(fw, 100)),
		r.Report.LongestFreeWait.Client, r.Report.LongestFreeWait.Seq, c.freeWaitBound(), r.Report.InDoubtWaits,
		r.Report.LateHolderWaits, r.Report.UnclaimedHandoffWaits, countAtLeast(fw, c.TTL))
	stalled, longest := stallTotal(r.History.Stalls)
	line("machine stalls (the harness unscheduled >%s, not counted by the liveness checks): n=%d total=%s longest=%s",
		stallThreshold, len(r.History.Stalls), roundDuration(stalled), roundDuration(longest))
	stalled, longest = stallTotal(r.History.ServerStalls)
	line("server stalls (a key sample answered >%s late, not counted by the liveness checks): n=%d total=%s longest=%s",
		stallThreshold, len(r.History.ServerStalls), roundDuration(stalled), roundDuration(longest))
	for _, group := range sortedKeys(r.Report.LossGaps) {
		gaps := r.Report.LossGaps[group]
		line("loss signalled (%s holders told while they worked)=%d, from the lease's end p50=%s p99=%s max=%s; slack %s",
			group, len(gaps), roundDuration(Percentile(gaps, 50)), roundDuration(Percentile(gaps, 99)),
			roundDuration(Percentile(gaps, 100)), schedulingSlack)
	}
	f := r.Final
	line("after the faults: every key acquired within %s (bound %s), queues drained in %s, goroutines %d before, %d after",
		roundDuration(f.Slowest), f.Bound, roundDuration(f.Drained), f.Goroutines[0], f.Goroutines[1])
	line("porcupine: %d stretches checked, illegal keys=%d, undecided keys=%v",
		r.Linearity.Pieces, len(r.Linearity.Illegal), r.Linearity.Unknown)
	if name := c.rwLock(); name != "" {
		for _, writers := range []bool{false, true} {
			waits, who := rwWaits(name, r.History.Acquisitions, writers), "readers"
			if writers {
				who = "writers"
			}
			line("read/write lock %s: %s=%d, their waits from call to grant p50=%s p99=%s max=%s", name, who, len(waits),
				roundDuration(Percentile(waits, 50)), roundDuration(Percentile(waits, 99)), roundDuration(Percentile(waits, 100)))
		}
		line("read/write lock %s: overlapping reader pairs=%d (readers held it together); checked against a read/write lock by Porcupine too",
			name, r.Report.ReaderOverlaps)
	}
	if c.Mode == ModeMulti {
		line("groups: %d acquisitions of 2–3 keys at once, %d of a single key", groupCount(r.History.Acquisitions),
			len(r.History.Acquisitions)-groupCount(r.History.Acquisitions))
	}
	var counts []string
	for _, kind := range []string{LeaseOverlap, NotLinearizable, CheckersDisagree, FenceInterleave, TokenOrder, WorkAfterLoss,
		PermitsExceeded, WriterOverlap, GroupPartial, SlowRecovery, SlowFreeWait, FinalAcquire, QueueNotDrained, GoroutineGrowth} {
		counts = append(counts, fmt.Sprintf("%s=%d", kind, r.Report.Count(kind)))
	}
	line("violations: %s", strings.Join(counts, " "))
	for i, v := range r.Report.Violations {
		if i == 10 {
			line("  ... and %d more", len(r.Report.Violations)-i)
			break
		}
		line("  %s", v)
	}
	return b.String()
}

// parts describes the faults, one "kind=count" a kind, the harness's kinds
// in order and then the network's.
func (f Faults) parts() []string {
	kinds := sortedKeys(f.Kinds)
	parts := make([]string, 0, len(kinds)+3)
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, f.Kinds[k]))
	}
	n := f.Network
	parts = append(parts, fmt.Sprintf("delayed=%d", n.Delayed), fmt.Sprintf("lost-replies=%d", n.Lost), fmt.Sprintf("cuts=%d", n.Cut),
		fmt.Sprintf("held=%d (delivered after a later request of their client: %d)", n.Held, n.Overtaken))
	return parts
}

func countAtLeast(ds []time.Duration, d time.Duration) int {
	return len(slices.DeleteFunc(slices.Clone(ds), func(x time.Duration) bool { return x < d }))
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of ds by the
// nearest-rank method, or 0 when ds is empty.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.SortFunc(sorted, cmp.Compare)
	rank := int(p/100*float64(len(sorted)) + 0.999999)
	return sorted[min(max(rank, 1), len(sorted))-1]
}
