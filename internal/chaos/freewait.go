package chaos

import (
	"container/heap"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Free waits: how long the first waiter in line waited while nobody held
// its key. A key is free of a holder from freedBy on (for a lease it did
// not release, also past what readers may rightly hold of it:
// Bounds.HeldPastOf); it is free from the
// latest freedBy of every holder granted so far, until the next grant.
// At each grant, and at each Acquire that gave up, the caller waiting
// longest among those still waiting then has waited on a free key from
// the later of its call and the moment the key became free.

// waitEnd is an instant at which a free wait may end: a grant, or a call
// that gave up.
type waitEnd struct {
	at    time.Time
	id    AcqID
	grant int // index of the grant in acqs; -1 for a call that gave up
}

// freeWaits fills FreeWaits and LongestFreeWait for one key and reports
// waits over b.FreeWait. acqs are sorted by grant; calls are the key's
// Acquire calls that won nothing. A write in doubt (Call.InDoubt, or a
// waiter killed mid-call) may have held the key for a whole lease without
// anyone knowing it owns it: a wait that such a lease may cover is counted
// in InDoubtWaits instead. Time a server spent down, or the machine
// stalled (down holds both), does not count. A
// wait over the bound is checked against what the server held (heldBy).
func (r *Report) freeWaits(key string, acqs []Acquisition, calls []Call, down []Interval, states []KeyState, stops []FaultAt,
	frozen map[string][]Interval, b Bounds) {
	var waiting []caller // every call, from its start to its end
	var ends []waitEnd
	var doubts []Interval // in-doubt calls: from the start to the latest end of a lease they may have left
	doubt := func(client string, from, to time.Time) {
		doubts = append(doubts, Interval{From: from, To: to.Add(b.lease(client) + b.Takeover)})
	}
	for i, a := range acqs {
		waiting = append(waiting, caller{Interval{From: called(a), To: a.Granted}, a.ID()})
		ends = append(ends, waitEnd{at: a.Granted, id: a.ID(), grant: i})
		if a.InDoubt {
			doubt(a.Client, called(a), a.Granted)
		}
	}
	for _, c := range calls {
		waiting = append(waiting, caller{Interval{From: c.Start, To: c.End}, AcqID{Client: c.Client, Seq: c.Seq}})
		if c.InDoubt || c.Killed {
			doubt(c.Client, c.Start, c.End)
		}
		if !c.Killed {
			ends = append(ends, waitEnd{at: c.End, id: AcqID{Client: c.Client, Seq: c.Seq}, grant: -1})
		}
	}
	stopped := stoppedWhileWaiting(waiting, stops)
	slices.SortFunc(waiting, func(a, b caller) int { return a.From.Compare(b.From) })
	slices.SortFunc(doubts, func(a, b Interval) int { return a.From.Compare(b.From) })
	slices.SortStableFunc(ends, func(a, b waitEnd) int { return a.at.Compare(b.at) })

	var (
		pending   startHeap // calls begun by now, by start; those over are dropped lazily
		next      int       // waiting[next] is the first call not yet begun
		nextDoubt int
		doubtEnd  time.Time // the latest end of a lease an in-doubt write begun by now may have left
		free      time.Time // the key is free of every holder granted so far from here on
		granted   int       // acqs[:granted] have been granted
	)
	for _, e := range ends {
		for next < len(waiting) && !waiting[next].From.After(e.at) {
			heap.Push(&pending, waiting[next])
			next++
		}
		for pending.Len() > 0 && pending[0].To.Before(e.at) {
			heap.Pop(&pending) // returned before this instant: no longer waiting
		}
		for nextDoubt < len(doubts) && doubts[nextDoubt].From.Before(e.at) {
			doubtEnd = later(doubtEnd, doubts[nextDoubt].To)
			nextDoubt++
		}
		for ; granted < len(acqs) && acqs[granted].Granted.Before(e.at); granted++ {
			a := acqs[granted]
			free = later(free, a.freedBy(b.Takeover+b.heldPast(a.Client)))
		}
		if e.grant < 0 && !free.IsZero() && !free.Before(e.at) {
			continue // a caller gave up while the key was held
		}
		first, from := firstInLine(pending, free, e.at, frozen)
		if first == nil || (e.grant < 0 && first.id != e.id) {
			continue // only the first in line giving up ends its wait
		}
		wait := e.at.Sub(from) - downtime(down, from, e.at) // a server down or a stalled machine holds nobody up
		if wait <= 0 {
			continue
		}
		if doubtEnd.After(from) {
			r.InDoubtWaits++
			continue
		}
		detail := ""
		if b.FreeWait > 0 && wait > b.FreeWait {
			var held, unclaimed bool
			if held, unclaimed, detail = heldBy(states, acqs, from, e.at, b, stopped); held {
				if unclaimed {
					r.UnclaimedHandoffWaits++ // a handoff nobody claimed held the key for its claim window
				} else {
					r.LateHolderWaits++ // a holder stopped before it could report its grant held the key
				}
				continue
			}
		}
		if wait > r.longestFreeWait {
			r.longestFreeWait, r.LongestFreeWait = wait, e.id
		}
		r.FreeWaits = append(r.FreeWaits, wait)
		if b.FreeWait > 0 && wait > b.FreeWait {
			what := "acquired"
			if e.grant < 0 {
				what = "gave up"
			}
			r.Violations = append(r.Violations, Violation{Kind: SlowFreeWait, Key: key, Second: e.id,
				Detail: fmt.Sprintf("%s after waiting %s on a key nobody held, bound %s%s", what, wait, b.FreeWait, detail)})
		}
	}
}

// firstInLine is the caller that has waited longest, by now, on the key
// free from free on, and since when: a caller waits from its call, and
// not while its process is stopped (frozen), since it can do nothing.
func firstInLine(pending startHeap, free, now time.Time, frozen map[string][]Interval) (*caller, time.Time) {
	var first *caller
	var since time.Time
	for i := range pending {
		c := &pending[i]
		if c.To.Before(now) {
			continue // over: the heap drops such callers only once they reach its top
		}
		from := later(free, c.From)
		for _, f := range slices.Concat(frozen[processOf(c.id.Client)], frozen[slotName(c.id.Client)]) {
			if f.From.Before(now) && f.To.After(from) {
				from = later(from, f.To)
			}
		}
		if from.Before(now) && (first == nil || from.Before(since)) {
			first, since = c, from
		}
	}
	return first, since
}

// called is when the acquisition's Acquire was called, or its grant if
// that is unknown.
func called(a Acquisition) time.Time {
	if a.Called.IsZero() {
		return a.Granted
	}
	return a.Called
}

// signalLag is how long a process may run on after the harness recorded
// that it stops or kills it: the harness records first, then signals, and
// the process is stopped only once the kernel delivers the signal. In
// that moment a loop can begin an Acquire and have its first write
// applied (seen in autorefresh: a call stamped 56µs and 100µs after the
// recorded stop, whose SETNX won and held the key for its lease while
// the process was stopped).
const signalLag = 5 * time.Millisecond

// caller is one Acquire call waiting from From to To.
type caller struct {
	Interval
	id AcqID
}

// startHeap is a min-heap of callers by start.
type startHeap []caller

// Len, Less, Swap, Push and Pop make startHeap a heap.Interface.
func (h startHeap) Len() int           { return len(h) }
func (h startHeap) Less(i, j int) bool { return h[i].From.Before(h[j].From) }
func (h startHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *startHeap) Push(x any)        { *h = append(*h, x.(caller)) }
func (h *startHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// stoppedWhileWaiting returns a function that reports whether the
// process of a caller of the key, waiting at an instant, was stopped or
// killed around it: it may have won the key just before, and never
// claimed the win, or late. Around is from 25ms before (a sample's
// period, and a write the loaded server applies late) to a sample after.
// A caller waits at the stop if its call began no later than signalLag
// after the harness recorded the stop.
func stoppedWhileWaiting(waiting []caller, stops []FaultAt) func(at time.Time) bool {
	return func(at time.Time) bool {
		for _, f := range stops {
			if f.At.Before(at.Add(-25*time.Millisecond)) || f.At.After(at.Add(sampleEvery)) {
				continue
			}
			for _, c := range waiting {
				if processOf(c.id.Client) == processOf(f.Client) && !c.From.After(f.At.Add(signalLag)) && !c.To.Before(f.At) {
					return true
				}
			}
		}
		return false
	}
}

// heldBy looks at what the server held for the key from from to to
// (states, sampled). It reports held when a value there, written by an
// attempt of its own, is the lease of an acquisition (its Expiry, or a
// renewal carrying the token of a value with that expiry) or of a caller
// stopped or killed right after it was written (stopped at that instant):
// a holder that reported its win late or could not use it. A value that
// replaced another's live lease was handed over by a release: held if its
// waiter claimed it within bound, and, with unclaimed, while it stated no
// more than the claim window (Bounds.ClaimWindow): a handoff nobody
// claimed costs that by design. Otherwise detail says what the
// key held. Without samples (a Cluster) a caller stopped or killed at any
// instant from a lease before from to to counts as holding.
func heldBy(states []KeyState, acqs []Acquisition, from, to time.Time, b Bounds, stopped func(time.Time) bool) (held, unclaimed bool, detail string) {
	if len(states) == 0 {
		for at := from.Add(-b.Lease); !at.After(to); at = at.Add(sampleEvery) {
			if stopped(at) {
				return true, false, ""
			}
		}
		return false, false, ""
	}
	leases := map[int64]Acquisition{}
	for _, a := range acqs {
		leases[a.Expiry] = a
	}
	queued := map[string]string{}     // entry token -> entry
	owner := map[string]Acquisition{} // token -> the holder that reported a lease with it: its renewals carry it too
	for _, s := range states {
		for _, e := range s.Queue {
			// "<Locker id>:<token>"; histories from before handoffs were
			// provisional hold "<score>:<expiry>:<Locker id>:<token>".
			if parts := strings.Split(e, ":"); len(parts) == 2 || len(parts) == 4 {
				queued[parts[len(parts)-1]] = e
			}
		}
		if expiry, err := parseExpiryMillis(s.Value); err == nil {
			if a, ok := leases[expiry]; ok {
				if _, token, found := strings.Cut(s.Value, ":"); found {
					owner[token] = a
				}
			}
		}
	}
	first := max(sort.Search(len(states), func(i int) bool { return states[i].At.After(from) })-1, 0)
	var seen []string
	var legit time.Duration // how much of the wait values that explain it covered
	explains := false       // whether the value of the previous sample explains the wait
	for i := first; i < len(states) && !states[i].At.After(to); i++ {
		s := states[i]
		until := to
		if i+1 < len(states) && states[i+1].At.Before(to) {
			until = states[i+1].At
		}
		covered := until.Sub(later(s.At, from))
		expiry, err := parseExpiryMillis(s.Value)
		if s.Value == "" || err != nil || covered <= 0 {
			continue
		}
		_, token, _ := strings.Cut(s.Value, ":")
		holder, reported := leases[expiry]
		if a, ok := owner[token]; ok && token != "" && !reported && s.At.Before(a.freedBy(b.Takeover)) {
			holder, reported = a, true // a renewal, while its holder held the key
		}
		handed := false
		if i > 0 {
			prev, err := parseExpiryMillis(states[i-1].Value)
			handed = err == nil && states[i-1].Value != s.Value && time.UnixMilli(prev).Add(b.Takeover).After(s.At) && queued[token] != ""
		}
		// A handoff's value states the claim window from the release, by
		// the releaser's clock (handon.lua, whose entries have two parts);
		// one that states more is a lease handed out.
		provisional := handed && strings.Count(queued[token], ":") == 1 && b.ClaimWindow > 0 &&
			!time.UnixMilli(expiry).After(s.At.Add(b.ClaimWindow+b.Takeover))
		claimed := ""
		if reported {
			claimed = fmt.Sprintf(", claimed by %s/%d %s later", holder.Client, holder.Seq, holder.Granted.Sub(s.At).Round(time.Millisecond))
		}
		repeat := i > first && s.Value == states[i-1].Value
		if !repeat {
			explains = false
		}
		switch {
		case repeat:
			if explains {
				legit += covered // a later sample of a value judged below
			}
		case provisional && !reported:
			legit, explains, unclaimed = legit+covered, true, true // it costs its claim window, by design
		case handed && !stopped(s.At) && (!reported || holder.Granted.Sub(s.At) > b.FreeWait):
			// (A handed key claimed by a waiter whose process was stopped
			// right after is held by a win it cannot use: the case below.)
			seen = append(seen, fmt.Sprintf("%s, handed by a release to the queue entry %s%s", s.Value, queued[token], claimed))
		case reported || stopped(s.At):
			legit, explains = legit+covered, true
		case queued[token] != "":
			seen = append(seen, fmt.Sprintf("%s, written for the queue entry %s, which nobody claimed", s.Value, queued[token]))
		default:
			seen = append(seen, s.Value+", which no holder reported")
		}
	}
	if to.Sub(from)-legit <= b.FreeWait {
		return true, unclaimed, ""
	}
	if len(seen) == 0 {
		return false, false, "; the key was empty"
	}
	return false, false, "; the key held " + strings.Join(seen, ", then ")
}

// parseExpiryMillis reads the expiry of a lock value in Unix milliseconds:
// its leading number, seconds when small.
func parseExpiryMillis(value string) (int64, error) {
	number, _, _ := strings.Cut(value, ":")
	whole, fraction, _ := strings.Cut(number, ".")
	n, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, err
	}
	if n < 1e11 { // seconds (the library's rule)
		ms, _ := strconv.ParseInt((fraction + "000")[:3], 10, 64)
		return n*1000 + ms, nil
	}
	return n, nil
}
