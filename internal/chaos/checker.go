package chaos

import (
	"slices"
	"strings"
	"time"
)

// The first checker: Check, a pure function from a history to its
// violations and measures, and the Report it returns. The checks of one key
// are in safety.go, recovery.go, freewait.go and loss.go.

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
	// ReaderOverlaps counts, in an rwlock run, the pairs of readers'
	// sections that overlapped: what a read/write lock allows, and what
	// shows that its readers were not served one at a time.
	ReaderOverlaps int `json:",omitempty"`
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
// time; with b.Semaphore, no more than b.Permits sections on its permit
// keys overlap; with b.RWLock, no writer's section on its keys overlaps
// any other, and its fencing tokens, where it has any, keep the
// read/write order (rwTokenOrder). A group lock's section is a section on each of its keys
// (perKey). Liveness: every crashed holder's key is acquired again within
// b.Recovery of the end of its lease, and no waiter waits longer than
// b.FreeWait for a key nobody holds; a read/write lock's keys are one key
// for these (Bounds.livenessKey).
func Check(h History, b Bounds) Report {
	r := Report{Acquisitions: len(h.Acquisitions)}
	groups := map[AcqID]string{} // each group's keys, by its ID
	for _, a := range h.Acquisitions {
		if isGroup(a.Key) {
			groups[a.ID()] = a.Key
		}
	}
	h = h.perKey()
	pause := paused(h) // a server down, the machine stalled: the liveness checks do not count it
	byKey := map[string][]Acquisition{}
	live := map[string][]Acquisition{} // by the key whose liveness they count for
	for _, a := range h.Acquisitions {
		byKey[a.Key] = append(byKey[a.Key], a)
		live[b.livenessKey(a.Key)] = append(live[b.livenessKey(a.Key)], a)
		if _, ok := a.Section(); ok {
			r.Sections++
		}
		if a.Entered.IsZero() || a.Overran {
			r.Overran++
		}
	}
	calls := semaphoreCalls(h, b)
	states := map[string][]KeyState{}
	for _, s := range h.Keys {
		states[s.Key] = append(states[s.Key], s)
	}
	var stops []FaultAt               // clients stopped, killed or cut off
	frozen := map[string][]Interval{} // when each client process was stopped (SIGSTOP)
	cut := map[string][]Interval{}    // also when each client slot was cut off from Redis (partitions), by slotName
	held := map[string][]Interval{}   // when the harness held a goroutine client's loop (a stall), by loop
	for _, f := range h.Faults {
		switch f.Kind {
		case FaultPause, FaultGrantPause, FaultKill, FaultWaiterKill, FaultReleaseKill, FaultStall:
			if strings.HasPrefix(f.Client, "p") {
				stops = append(stops, f)
				if !f.Until.IsZero() {
					frozen[processOf(f.Client)] = append(frozen[processOf(f.Client)], Interval{From: f.At, To: f.Until})
					cut[processOf(f.Client)] = append(cut[processOf(f.Client)], Interval{From: f.At, To: f.Until})
				}
			} else if !f.Until.IsZero() { // a goroutine's stall or grant pause: its loop alone waits for the resource's reply
				held[f.Client] = append(held[f.Client], Interval{From: f.At, To: f.Until})
			}
		case FaultPartition:
			stops = append(stops, f)
			cut[slotName(f.Client)] = append(cut[slotName(f.Client)], Interval{From: f.At, To: f.Until})
		}
	}
	claims := doubtSpans(h.Doubts, b)
	for _, key := range sortedKeys(byKey) {
		acqs := byGrant(byKey[key])
		overlaps := leaseOverlaps(key, acqs)
		r.Violations = append(r.Violations, overlaps...)
		r.Violations = append(r.Violations, groupPartials(overlaps, groups)...)
		if b.Fenced {
			r.Violations = append(r.Violations, tokenOrder(key, acqs)...)
		}
	}
	for _, key := range sortedKeys(live) {
		acqs := byGrant(live[key])
		r.recovery(key, acqs, calls[key], claims[key], states[key], h.End, pause, b)
		r.freeWaits(key, acqs, calls[key], claims[key], pause, states[key], stops, cut, b)
		r.lossSignals(key, acqs, h.End, pause, frozen, held, b)
	}
	if b.Fenced {
		r.Violations = append(r.Violations, fenceInterleaves(h.Ops)...)
	}
	if b.Semaphore != "" {
		r.Violations = append(r.Violations, permitsExceeded(b.Semaphore, b.Permits, h.Acquisitions)...)
	}
	if b.RWLock != "" {
		overlaps, pairs := writerOverlaps(b.RWLock, h.Acquisitions)
		r.Violations, r.ReaderOverlaps = append(r.Violations, overlaps...), pairs
		r.Violations = append(r.Violations, rwTokenOrder(b.RWLock, h.Acquisitions)...)
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
