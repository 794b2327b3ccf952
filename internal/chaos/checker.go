package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Kinds of violation Check reports.
const (
	// LeaseOverlap: two clients held the same key at once, each within
	// its own lease — mutual exclusion failed.
	LeaseOverlap = "lease-overlap"
	// FenceInterleave: the resource accepted a write of a holder after it
	// had accepted a write of a later holder of the same key — the fence
	// let a stale holder back in.
	FenceInterleave = "fence-interleave"
	// TokenOrder: an acquisition that began after another had been granted
	// drew a fencing token no larger — tokens did not strictly increase.
	TokenOrder = "token-order"
	// SlowRecovery: a crashed holder's key was not acquired again within
	// Bounds.Recovery of the end of its lease (liveness).
	SlowRecovery = "slow-recovery"
)

// Bounds parameterise the liveness check.
type Bounds struct {
	// Recovery is how long after a crashed holder's lease ended the next
	// acquisition of its key may come: the skew margin, the skew between
	// the two clients' clocks, one backoff step, and an allowance for a
	// round trip the network faults delayed. Time the server spent down is
	// added to it.
	Recovery time.Duration
}

// Violation is one broken property, with the acquisitions involved.
type Violation struct {
	Kind   string
	Key    string
	First  AcqID // the earlier acquisition (or the crashed one for SlowRecovery)
	Second AcqID // the later one; empty when there is none
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s on %q: %s/%d vs %s/%d: %s", v.Kind, v.Key, v.First.Client, v.First.Seq, v.Second.Client, v.Second.Seq, v.Detail)
}

// Report is what Check found.
type Report struct {
	Acquisitions int
	Violations   []Violation
	// Recovered holds, for each crashed holder whose key was acquired
	// again, the time from the end of its lease to that acquisition.
	Recovered []time.Duration
	// Slowest is the crashed acquisition whose recovery took longest, and
	// the acquisition that recovered it.
	Slowest struct{ Crashed, Next AcqID }
	// Unrecovered counts crashed holders whose lease ended too close to
	// the end of the run to tell.
	Unrecovered int
}

// Count returns how many violations of a kind the report holds.
func (r Report) Count(kind string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind == kind {
			n++
		}
	}
	return n
}

// Safety returns how many violations are of a safety property, that is
// every kind but SlowRecovery.
func (r Report) Safety() int { return len(r.Violations) - r.Count(SlowRecovery) }

// Check verifies a history. It is a pure function: the same history gives
// the same report. Safety: no two holders of a key within their leases at
// once; the resource never accepts a stale holder's write after a later
// holder's; fencing tokens strictly increase per key along real time.
// Liveness: every crashed holder's key is acquired again within
// b.Recovery of the end of its lease.
func Check(h History, b Bounds) Report {
	r := Report{Acquisitions: len(h.Acquisitions)}
	byKey := map[string][]Acquisition{}
	for _, a := range h.Acquisitions {
		byKey[a.Key] = append(byKey[a.Key], a)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a stable order of violations, for a stable report
	for _, key := range keys {
		acqs := byKey[key]
		r.Violations = append(r.Violations, leaseOverlaps(key, acqs)...)
		r.Violations = append(r.Violations, tokenOrder(key, acqs)...)
		r.liveness(key, acqs, h, b)
	}
	r.Violations = append(r.Violations, fenceInterleaves(h.Ops)...)
	return r
}

// leaseOverlaps finds pairs of acquisitions of one key whose held
// intervals overlap.
func leaseOverlaps(key string, acqs []Acquisition) []Violation {
	sorted := slices.Clone(acqs)
	slices.SortFunc(sorted, func(a, b Acquisition) int { return a.Granted.Compare(b.Granted) })
	var out []Violation
	for i, a := range sorted {
		held := a.Held()
		for _, b := range sorted[i+1:] {
			if !b.Granted.Before(held.To) {
				break // sorted by grant: no later one can start inside a's interval
			}
			if held.overlaps(b.Held()) {
				out = append(out, Violation{Kind: LeaseOverlap, Key: key, First: a.ID(), Second: b.ID(),
					Detail: fmt.Sprintf("granted %s into the first's lease, which ran %s more",
						b.Granted.Sub(a.Granted), held.To.Sub(b.Granted))})
			}
		}
	}
	return out
}

// tokenOrder checks that when an acquisition was granted before another
// was even sent, its token is smaller, and that no token repeats.
func tokenOrder(key string, acqs []Acquisition) []Violation {
	var out []Violation
	byToken := map[int64]Acquisition{}
	for _, a := range acqs {
		if prev, dup := byToken[a.Token]; dup {
			out = append(out, Violation{Kind: TokenOrder, Key: key, First: prev.ID(), Second: a.ID(),
				Detail: fmt.Sprintf("both drew token %d", a.Token)})
			continue
		}
		byToken[a.Token] = a
	}
	granted := slices.Clone(acqs)
	slices.SortFunc(granted, func(a, b Acquisition) int { return a.Granted.Compare(b.Granted) })
	sent := slices.Clone(acqs)
	slices.SortFunc(sent, func(a, b Acquisition) int { return a.Sent.Compare(b.Sent) })
	var (
		maxBefore Acquisition // the largest token among those granted before the current one was sent
		seen      bool
		next      int
	)
	for _, b := range sent {
		for next < len(granted) && granted[next].Granted.Before(b.Sent) {
			if g := granted[next]; !seen || g.Token > maxBefore.Token {
				maxBefore, seen = g, true
			}
			next++
		}
		if seen && maxBefore.Token >= b.Token && maxBefore.ID() != b.ID() {
			out = append(out, Violation{Kind: TokenOrder, Key: key, First: maxBefore.ID(), Second: b.ID(),
				Detail: fmt.Sprintf("token %d drawn after token %d had been granted", b.Token, maxBefore.Token)})
		}
	}
	return out
}

// fenceInterleaves finds a holder whose write was accepted after a write
// of another holder of the same key had been accepted since its own last.
func fenceInterleaves(ops []Op) []Violation {
	type state struct {
		last   AcqID // the holder whose write the resource accepted last
		closed map[AcqID]AcqID
	}
	keys := map[string]*state{}
	var out []Violation
	for _, op := range ops {
		if !op.Accepted {
			continue
		}
		s := keys[op.Key]
		if s == nil {
			s = &state{closed: map[AcqID]AcqID{}}
			keys[op.Key] = s
		}
		if s.last != op.AcqID && s.last != (AcqID{}) {
			s.closed[s.last] = op.AcqID // its turn is over: op's holder came after it
			if after, ok := s.closed[op.AcqID]; ok {
				out = append(out, Violation{Kind: FenceInterleave, Key: op.Key, First: after, Second: op.AcqID,
					Detail: fmt.Sprintf("write with token %d accepted after a later holder's", op.Token)})
			}
		}
		s.last = op.AcqID
	}
	return out
}

// liveness measures how soon each crashed holder's key was acquired again.
func (r *Report) liveness(key string, acqs []Acquisition, h History, b Bounds) {
	sorted := slices.Clone(acqs)
	slices.SortFunc(sorted, func(a, b Acquisition) int { return a.Granted.Compare(b.Granted) })
	for i, a := range sorted {
		if a.Crashed.IsZero() {
			continue
		}
		if i+1 == len(sorted) {
			if waited := h.End.Sub(a.LeaseEnd) - downtime(h.Downtime, a.LeaseEnd, h.End); waited > b.Recovery {
				r.Violations = append(r.Violations, Violation{Kind: SlowRecovery, Key: key, First: a.ID(),
					Detail: fmt.Sprintf("never acquired again in the %s the run went on after its lease", waited)})
			} else {
				r.Unrecovered++
			}
			continue
		}
		next := sorted[i+1]
		recovered := max(next.Granted.Sub(a.LeaseEnd), 0)
		if len(r.Recovered) == 0 || recovered > slices.Max(r.Recovered) {
			r.Slowest.Crashed, r.Slowest.Next = a.ID(), next.ID()
		}
		r.Recovered = append(r.Recovered, recovered)
		if waited := recovered - downtime(h.Downtime, a.LeaseEnd, next.Granted); waited > b.Recovery {
			r.Violations = append(r.Violations, Violation{Kind: SlowRecovery, Key: key, First: a.ID(), Second: next.ID(),
				Detail: fmt.Sprintf("acquired again %s after the crashed lease ended, bound %s", recovered, b.Recovery)})
		}
	}
}

// downtime is how much of [from, to] the server spent down.
func downtime(down []Interval, from, to time.Time) time.Duration {
	var total time.Duration
	for _, d := range down {
		start, end := later(d.From, from), earlier(d.To, to)
		if start.Before(end) {
			total += end.Sub(start)
		}
	}
	return total
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
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
