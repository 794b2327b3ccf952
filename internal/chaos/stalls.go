package chaos

import (
	"slices"
	"time"
)

// The stall watch: the liveness checks (slow recovery, slow free wait)
// bound how long a key may sit free while someone wants it, and those
// bounds allow a little scheduling delay, not a machine so loaded that
// nothing runs. The harness therefore watches its own scheduling: a
// goroutine that sleeps stallTick at a time and, when it wakes later than
// stallTick+stallThreshold, records the interval in which it could not run
// (History.Stalls). The checks do not count that time, as they do not
// count a server's downtime: a machine that ran nobody held nobody up.
// The report prints how much time it was, so a run that owes its pass to
// stalls says so. Safety checks never look at stalls.
//
// The server can stall too while the harness runs: with appendfsync
// always (the persistence restarts assume) every write waits for an
// fsync, which a busy disk can make slow for every client at once. The
// key sampler (sampler.go) reads every key straight from the server every
// sampleEvery; a sample answered more than stallThreshold after it was
// sent records that interval as a server stall (History.ServerStalls).
// The liveness checks do not count it either, as they do not count a
// restart's downtime, and the report prints it. A library that made the
// server slow would show here, not pass unseen.

const (
	stallTick      = 2 * time.Millisecond
	stallThreshold = 10 * time.Millisecond
)

// watchStalls records the harness's scheduling stalls until the run stops.
func (h *harness) watchStalls() {
	defer h.wg.Done()
	last := time.Now()
	for {
		select {
		case <-h.stop:
			return
		case <-time.After(stallTick):
		}
		now := time.Now()
		if now.Sub(last) > stallTick+stallThreshold {
			h.rec.stalled(Interval{From: last.Add(stallTick), To: now})
		}
		last = now
	}
}

// paused merges the intervals in which nobody could make progress through
// no fault of the library: a server down, the machine stalled, the server
// stalled. Overlaps are merged, so no instant counts twice.
func paused(h History) []Interval {
	return merged(slices.Concat(h.Downtime, h.Stalls, h.ServerStalls))
}

// merged sorts intervals and merges those that overlap, so no instant
// counts twice.
func merged(all []Interval) []Interval {
	all = slices.Clone(all)
	slices.SortFunc(all, func(a, b Interval) int { return a.From.Compare(b.From) })
	var out []Interval
	for _, i := range all {
		if n := len(out); n > 0 && !i.From.After(out[n-1].To) {
			out[n-1].To = later(out[n-1].To, i.To)
			continue
		}
		out = append(out, i)
	}
	return out
}

// stallTotal is the time the harness spent stalled, and the longest stall.
func stallTotal(stalls []Interval) (total, longest time.Duration) {
	for _, s := range stalls {
		d := s.To.Sub(s.From)
		total += d
		longest = max(longest, d)
	}
	return total, longest
}
