package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Kinds of violation Check reports.
const (
	// LeaseOverlap: two critical sections on one key overlapped in real
	// time, each inside its holder's lease by the holder's own clock —
	// mutual exclusion failed.
	LeaseOverlap = "lease-overlap"
	// FenceInterleave: the resource accepted a write of a holder after it
	// had accepted a write of a later holder of the same key — the fence
	// let a stale holder back in (fencing runs only).
	FenceInterleave = "fence-interleave"
	// TokenOrder: an acquisition that began after another had been granted
	// drew a fencing token no larger — tokens did not strictly increase
	// (fencing runs only).
	TokenOrder = "token-order"
	// SlowRecovery: a crashed holder's key was not acquired again within
	// Bounds.Recovery of the end of its lease (liveness).
	SlowRecovery = "slow-recovery"
	// SlowFreeWait: a waiter waited longer than Bounds.FreeWait for a key
	// nobody held (liveness).
	SlowFreeWait = "slow-free-wait"
	// NotLinearizable: the second checker (Porcupine, linearize.go) found
	// no order of a key's acquire and release operations that a lock
	// allows.
	NotLinearizable = "not-linearizable"
	// CheckersDisagree: the two checkers disagree about a key: a bug in
	// one of them.
	CheckersDisagree = "checkers-disagree"
	// WorkAfterLoss: a holder that works until its lock tells it of a
	// loss was still working, untold, longer than Bounds.LossSlack past
	// the end of its lease by its own clock (H11): the others may hold
	// the key by then.
	WorkAfterLoss = "work-after-loss"

	// The liveness checks of the end of a run (final.go), once the faults
	// have stopped.

	// FinalAcquire: a key could not be acquired within Bounds.Final.
	FinalAcquire = "final-acquire"
	// QueueNotDrained: a key's queue of waiters still held entries after
	// every Locker had stopped and the bound had passed.
	QueueNotDrained = "queue-not-drained"
	// GoroutineGrowth: the harness had more goroutines after its Lockers
	// closed than before the run.
	GoroutineGrowth = "goroutine-growth"
)

// liveness reports whether a kind of violation is about liveness.
func liveness(kind string) bool {
	switch kind {
	case SlowRecovery, SlowFreeWait, FinalAcquire, QueueNotDrained, GoroutineGrowth:
		return true
	}
	return false
}

// Bounds parameterise the checks.
type Bounds struct {
	// Recovery is how long after a crashed holder's lease ended the next
	// acquisition of its key may come: the skew margin, the skew between
	// the two clients' clocks, one backoff step, and an allowance for a
	// round trip the network faults delayed. Time the server spent down,
	// and time the machine stalled (stalls.go), is added to it.
	Recovery time.Duration
	// FreeWait bounds how long a waiter may wait for a key nobody holds;
	// 0: not checked.
	FreeWait time.Duration
	// Takeover is how long after a lease's end by its holder's clock any
	// other client may take it over at the latest: the skew margin plus
	// the skew.
	Takeover time.Duration
	// Lease is the longest lease a client of the run writes (the TTL, or
	// more in a format that rounds up): how long a write nobody knows it
	// owns can keep a key (Call.InDoubt). LeaseOf, when set, gives it
	// client by client.
	Lease   time.Duration
	LeaseOf func(client string) time.Duration `json:"-"`
	// HeldPastOf, when set, gives how long past the end of its lease a
	// client's unreleased lease (crashed, lost, its release refused) may
	// rightly keep its key: readers hold a whole second's value through
	// the end of that second, until the safety net (H6) ends it. It is
	// added to Recovery for that holder, and a free wait for its key
	// starts that much later.
	HeldPastOf func(client string) time.Duration `json:"-"`
	// ClaimWindow is how long a release's handoff value lasts when the
	// waiter it names never claims it (the library's claimWindow): the
	// documented cost of a waiter that left just as it was handed the
	// key, or whose Locker stopped listening. A free wait the key spent
	// holding such a value is not the library's to shorten; a handed
	// value that states a longer lease is (heldBy).
	ClaimWindow time.Duration
	// Fenced: the clients use fencing tokens, so the resource's fence and
	// the tokens' order are checked too.
	Fenced bool
	// UntilLost, when set, names the group (for the report) of a client
	// that works until its lock tells it of a loss, and "" for one that
	// checks its lease itself; the first kind's sections are checked for
	// work after loss (lossSignals).
	UntilLost func(client string) string `json:"-"`
	// LossSlack is how long past its lease's end such a holder may work
	// untold: the time to schedule it once the loss is signalled.
	LossSlack time.Duration
}

// recoveryOf is the recovery bound of a crashed lease of client.
func (b Bounds) recoveryOf(client string) time.Duration {
	return b.Recovery + b.heldPast(client)
}

// heldPast is how long past its end an unreleased lease of client may
// keep its key (HeldPastOf).
func (b Bounds) heldPast(client string) time.Duration {
	if b.HeldPastOf != nil {
		return b.HeldPastOf(client)
	}
	return 0
}

// lease is the longest lease client writes.
func (b Bounds) lease(client string) time.Duration {
	if b.LeaseOf != nil {
		return b.LeaseOf(client)
	}
	return b.Lease
}

// Violation is one broken property, with the acquisitions involved.
type Violation struct {
	Kind   string
	Key    string
	First  AcqID // the earlier acquisition (or the crashed one for SlowRecovery)
	Second AcqID // the later one; empty when there is none
	Detail string
}

// String describes the violation on one line.
func (v Violation) String() string {
	return fmt.Sprintf("%s on %q: %s/%d vs %s/%d: %s", v.Kind, v.Key, v.First.Client, v.First.Seq, v.Second.Client, v.Second.Seq, v.Detail)
}

// Report is what Check found.
type Report struct {
	Acquisitions int
	Sections     int // acquisitions whose holder entered its critical section within its lease
	// Overran counts H8: holders whose lease ended before they entered
	// (stalled right after the grant) or while they were inside.
	Overran    int
	Violations []Violation
	// Recovered holds, for each crashed holder whose key was acquired
	// again, the time from the end of its lease to that acquisition, less
	// the time the server was down or the machine stalled.
	Recovered []time.Duration
	// Slowest is the crashed acquisition whose recovery took longest, and
	// the acquisition that recovered it.
	Slowest struct{ Crashed, Next AcqID }
	// Unrecovered counts crashed holders whose lease ended too close to
	// the end of the run to tell.
	Unrecovered int
	// FreeWaits holds, for each acquisition that came after a waiter had
	// waited on a key nobody held, that wait (freeWaits).
	FreeWaits []time.Duration
	// LongestFreeWait is the acquisition (or the call that gave up) that
	// ended the longest of them.
	LongestFreeWait AcqID
	longestFreeWait time.Duration
	// InDoubtWaits counts waits left out of FreeWaits because a write in
	// doubt may have held the key (Call.InDoubt); LateHolderWaits those
	// over the bound during which the server held a lease of a holder that
	// reported its grant late (heldBy); UnclaimedHandoffWaits those over
	// the bound that a handoff nobody claimed explains (Bounds.ClaimWindow).
	InDoubtWaits, LateHolderWaits, UnclaimedHandoffWaits int
	// InDoubtRecoveries counts recoveries left out of Recovered because a
	// call whose write was in doubt, or whose process was killed in it,
	// may have won the key once the crashed lease ended and held it for a
	// lease of its own.
	InDoubtRecoveries int
	// LossGaps holds, by group (Bounds.UntilLost), for each holder told
	// of its loss while it worked, the time from its lease's end by its
	// own clock to the signal, less the time its process was stopped or
	// the machine stalled: negative when the loss was known before the
	// lease ran out (a renewal refused).
	LossGaps map[string][]time.Duration `json:",omitempty"`
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

// Safety returns how many violations are of a safety property: every kind
// but the liveness ones.
func (r Report) Safety() int {
	n := 0
	for _, v := range r.Violations {
		if !liveness(v.Kind) {
			n++
		}
	}
	return n
}

// Check verifies a history. It is a pure function: the same history gives
// the same report. Safety: no two critical sections of a key overlap,
// each counted only while its holder's clock said its lease was live; with
// b.Fenced, the resource never accepts a stale holder's write after a
// later holder's, and fencing tokens strictly increase per key along real
// time. Liveness: every crashed holder's key is acquired again within
// b.Recovery of the end of its lease, and no waiter waits longer than
// b.FreeWait for a key nobody holds.
func Check(h History, b Bounds) Report {
	r := Report{Acquisitions: len(h.Acquisitions)}
	pause := paused(h) // a server down, the machine stalled: the liveness checks do not count it
	byKey := map[string][]Acquisition{}
	for _, a := range h.Acquisitions {
		byKey[a.Key] = append(byKey[a.Key], a)
		if _, ok := a.Section(); ok {
			r.Sections++
		}
		if a.Entered.IsZero() || a.Overran {
			r.Overran++
		}
	}
	calls := map[string][]Call{}
	for _, c := range h.Calls {
		calls[c.Key] = append(calls[c.Key], c)
	}
	states := map[string][]KeyState{}
	for _, s := range h.Keys {
		states[s.Key] = append(states[s.Key], s)
	}
	var stops []FaultAt               // clients stopped, killed or cut off
	frozen := map[string][]Interval{} // when each client process was stopped (SIGSTOP)
	cut := map[string][]Interval{}    // also when each client slot was cut off from Redis (partitions), by slotName
	for _, f := range h.Faults {
		switch f.Kind {
		case FaultPause, FaultGrantPause, FaultKill, FaultWaiterKill, FaultReleaseKill:
			if strings.HasPrefix(f.Client, "p") {
				stops = append(stops, f)
				if !f.Until.IsZero() {
					frozen[processOf(f.Client)] = append(frozen[processOf(f.Client)], Interval{From: f.At, To: f.Until})
					cut[processOf(f.Client)] = append(cut[processOf(f.Client)], Interval{From: f.At, To: f.Until})
				}
			}
		case FaultPartition:
			stops = append(stops, f)
			cut[slotName(f.Client)] = append(cut[slotName(f.Client)], Interval{From: f.At, To: f.Until})
		}
	}
	for _, key := range sortedKeys(byKey) {
		acqs := byGrant(byKey[key])
		r.Violations = append(r.Violations, leaseOverlaps(key, acqs)...)
		if b.Fenced {
			r.Violations = append(r.Violations, tokenOrder(key, acqs)...)
		}
		r.recovery(key, acqs, calls[key], states[key], h.End, pause, b)
		r.freeWaits(key, acqs, calls[key], pause, states[key], stops, cut, b)
		r.lossSignals(key, acqs, h.End, pause, frozen, b)
	}
	if b.Fenced {
		r.Violations = append(r.Violations, fenceInterleaves(h.Ops)...)
	}
	return r
}

// sortedKeys returns the map's keys in order, for a stable report.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// byGrant returns the acquisitions sorted by the instant Acquire returned.
func byGrant(acqs []Acquisition) []Acquisition {
	sorted := slices.Clone(acqs)
	slices.SortFunc(sorted, func(a, b Acquisition) int { return a.Granted.Compare(b.Granted) })
	return sorted
}

// leaseOverlaps finds pairs of critical sections of one key that overlap.
// acqs are sorted by grant; sections are compared by entry.
func leaseOverlaps(key string, acqs []Acquisition) []Violation {
	type section struct {
		Interval
		id AcqID
	}
	var sections []section
	for _, a := range acqs {
		if s, ok := a.Section(); ok {
			sections = append(sections, section{s, a.ID()})
		}
	}
	slices.SortFunc(sections, func(a, b section) int { return a.From.Compare(b.From) })
	var out []Violation
	for i, a := range sections {
		for _, b := range sections[i+1:] {
			if !b.From.Before(a.To) {
				break // sorted by entry: no later one can start inside a's section
			}
			if a.overlaps(b.Interval) {
				out = append(out, Violation{Kind: LeaseOverlap, Key: key, First: a.id, Second: b.id,
					Detail: fmt.Sprintf("entered %s into the first's section, which went on %s more within its lease",
						b.From.Sub(a.From), a.To.Sub(b.From))})
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
	granted := byGrant(acqs)
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

// recovery measures how soon each crashed holder's key was acquired again.
// acqs are sorted by grant; calls are the key's Acquire calls that won
// nothing, of which those in doubt or killed may have held the key unknown;
// states are the key's samples, in which a lease nobody was granted shows
// a write in doubt (unreportedLease).
func (r *Report) recovery(key string, acqs []Acquisition, calls []Call, states []KeyState, end time.Time, pause []Interval, b Bounds) {
	mayHaveHeld := func(from, to time.Time) bool {
		for _, c := range calls {
			if (c.InDoubt || c.Killed) && c.Start.Before(to) && c.End.Add(b.lease(c.Client)+b.Takeover).After(from) {
				return true
			}
		}
		return false
	}
	sorted := acqs
	for i, a := range sorted {
		if a.Crashed.IsZero() {
			continue
		}
		if i+1 == len(sorted) {
			if waited := end.Sub(a.LeaseEnd) - downtime(pause, a.LeaseEnd, end); waited > b.recoveryOf(a.Client) {
				r.Violations = append(r.Violations, Violation{Kind: SlowRecovery, Key: key, First: a.ID(),
					Detail: fmt.Sprintf("never acquired again in the %s the run went on after its lease", waited)})
			} else {
				r.Unrecovered++
			}
			continue
		}
		next := sorted[i+1]
		from := wantedFrom(acqs, calls, a.LeaseEnd, next.Granted)
		recovered := max(next.Granted.Sub(from)-downtime(pause, from, next.Granted), 0) // a server down or a stalled machine holds nobody up
		bound := b.recoveryOf(a.Client)
		if recovered > bound && mayHaveHeld(a.LeaseEnd, next.Granted) {
			r.InDoubtRecoveries++
			continue
		}
		if leaseEnd, ok := unreportedLease(states, acqs, a.LeaseEnd, next.Granted); recovered > bound && ok &&
			max(next.Granted.Sub(leaseEnd)-downtime(pause, leaseEnd, next.Granted), 0) <= bound {
			r.InDoubtRecoveries++ // recovered within the bound of the lease in doubt
			continue
		}
		if len(r.Recovered) == 0 || recovered > slices.Max(r.Recovered) {
			r.Slowest.Crashed, r.Slowest.Next = a.ID(), next.ID()
		}
		r.Recovered = append(r.Recovered, recovered)
		if recovered > bound {
			r.Violations = append(r.Violations, Violation{Kind: SlowRecovery, Key: key, First: a.ID(), Second: next.ID(),
				Detail: fmt.Sprintf("acquired again %s after the crashed lease ended, bound %s", recovered, bound)})
		}
	}
}

// wantedFrom is when the key, free of a crashed lease from free on, was
// first wanted before to: free, if an Acquire of it was under way then,
// or the first call after it. A key nobody asks for is not acquired, and
// its recovery counts from the first call (seen in a default run on a
// loaded machine: nobody called for chaos.k1 for 1.2s after the crashed
// lease ended, and the next call won in 63ms).
func wantedFrom(acqs []Acquisition, calls []Call, free, to time.Time) time.Time {
	first := to
	for _, a := range acqs {
		if c := called(a); c.Before(first) && a.Granted.After(free) {
			first = c
		}
	}
	for _, c := range calls {
		if c.Start.Before(first) && c.End.After(free) {
			first = c.Start
		}
	}
	return later(first, free)
}

// unreportedLease is the latest end stated by a value the key held from
// from to to that no acquisition was granted with: a write whose reply was
// lost (H5) inside an Acquire that went on, or gave up. A Locker writing
// bare timestamps cannot tell its own lost write from another client's
// identical value, so it waits that lease out, as classic clients do (the
// library's remember): the key's recovery is then due within the bound of
// that lease's end, not the crashed one's.
func unreportedLease(states []KeyState, acqs []Acquisition, from, to time.Time) (time.Time, bool) {
	granted := make(map[int64]bool, len(acqs))
	for _, a := range acqs {
		granted[a.Expiry] = true
	}
	var end time.Time
	found := false
	for _, s := range states {
		if s.At.Before(from) || s.At.After(to) || s.Value == "" {
			continue
		}
		expiry, err := parseExpiryMillis(s.Value)
		if err != nil || granted[expiry] {
			continue
		}
		if e := time.UnixMilli(expiry); e.After(end) {
			end, found = e, true
		}
	}
	return end, found
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
