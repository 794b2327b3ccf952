package chaos

import (
	"fmt"
	"slices"
	"time"
)

// The recovery check: how soon a crashed holder's key is acquired again,
// leaving out what the run excuses (a server down, the machine stalled, a
// write in doubt that may have held the key).

// recovery measures how soon each crashed holder's key was acquired again.
// acqs are sorted by grant; calls are the key's Acquire calls that won
// nothing, of which those in doubt or killed may have held the key unknown,
// as may the claims in doubt (claimdoubts.go), which span when; states are the key's samples, in which a lease nobody was granted shows
// a write in doubt (unreportedLease).
func (r *Report) recovery(key string, acqs []Acquisition, calls []Call, claims []Interval, states []KeyState, end time.Time, pause []Interval, b Bounds) {
	mayHaveHeld := func(from, to time.Time) bool {
		for _, c := range calls {
			if (c.InDoubt || c.Killed) && c.Start.Before(to) && c.End.Add(b.lease(c.Client)+b.Takeover).After(from) {
				return true
			}
		}
		return within(claims, from, to)
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
