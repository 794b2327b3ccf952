package chaos

import (
	"container/heap"
	"fmt"
	"slices"
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
// in InDoubtWaits instead, as is one a claim in doubt (claims, the spans
// in which one may have held the key: claimdoubts.go) may cover. Time a server spent down, or the machine
// stalled (down holds both), does not count. A
// wait over the bound is checked against what the server held (heldBy).
func (r *Report) freeWaits(key string, acqs []Acquisition, calls []Call, claims []Interval, down []Interval, states []KeyState, stops []FaultAt,
	frozen map[string][]Interval, b Bounds) {
	waiting, ends, doubts := waitsOf(acqs, calls, b)
	doubts = append(doubts, claims...)
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
		r.freeWait(key, e, from, wait, acqs, states, b, stopped)
	}
}

// waitsOf lists, for freeWaits, every call of the key from its start to
// its end (acquisitions first, in acqs' order, then calls), the instants a
// free wait may end (grants, and calls that gave up, unless killed), and
// for each write in doubt the span from its call's start to the latest end
// of a lease it may have left.
func waitsOf(acqs []Acquisition, calls []Call, b Bounds) (waiting []caller, ends []waitEnd, doubts []Interval) {
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
	return waiting, ends, doubts
}

// freeWait counts one free wait of the key, wait long from from, that the
// end e ended and no write in doubt explains: a wait over b.FreeWait that
// what the server held explains (heldBy) is counted as such; any other is
// among FreeWaits, and over the bound a violation.
func (r *Report) freeWait(key string, e waitEnd, from time.Time, wait time.Duration, acqs []Acquisition, states []KeyState, b Bounds,
	stopped func(time.Time) bool) {
	detail := ""
	if b.FreeWait > 0 && wait > b.FreeWait {
		var held, unclaimed bool
		if held, unclaimed, detail = heldBy(states, acqs, from, e.at, b, stopped); held {
			if unclaimed {
				r.UnclaimedHandoffWaits++ // a handoff nobody claimed held the key for its claim window
			} else {
				r.LateHolderWaits++ // a holder stopped before it could report its grant held the key
			}
			return
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
