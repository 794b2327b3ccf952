package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// What the server held while a waiter waited on a key nobody was known to
// hold: the sampled values, read for a holder that reported its win late,
// a process stopped right after it won, or a handoff nobody claimed.

// signalLag is how long a process may run on after the harness recorded
// that it stops or kills it: the harness records first, then signals, and
// the process is stopped only once the kernel delivers the signal. In
// that moment a loop can begin an Acquire and have its first write
// applied (seen in autorefresh: a call stamped 56µs and 100µs after the
// recorded stop, whose SETNX won and held the key for its lease while
// the process was stopped).
const signalLag = 5 * time.Millisecond

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
	x := indexStates(states, acqs)
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
		v := x.read(states, i, expiry, b)
		repeat := i > first && s.Value == states[i-1].Value
		if !repeat {
			explains = false
		}
		switch {
		case repeat:
			if explains {
				legit += covered // a later sample of a value judged below
			}
		case v.provisional && !v.reported:
			legit, explains, unclaimed = legit+covered, true, true // it costs its claim window, by design
		case v.handed && !stopped(s.At) && (!v.reported || v.holder.Granted.Sub(s.At) > b.FreeWait):
			// (A handed key claimed by a waiter whose process was stopped
			// right after is held by a win it cannot use: the case below.)
			seen = append(seen, fmt.Sprintf("%s, handed by a release to the queue entry %s%s", s.Value, x.queued[v.token], v.claimed))
		case v.reported || stopped(s.At):
			legit, explains = legit+covered, true
		case x.queued[v.token] != "":
			seen = append(seen, fmt.Sprintf("%s, written for the queue entry %s, which nobody claimed", s.Value, x.queued[v.token]))
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

// stateIndex is what heldBy reads the key's samples against: the
// acquisitions by the expiry they were granted with (leases), the queue
// entries seen by their token (queued), and the holder that reported a
// lease with each token (owner): its renewals carry that token too.
type stateIndex struct {
	leases map[int64]Acquisition
	queued map[string]string
	owner  map[string]Acquisition
}

// indexStates builds the stateIndex of the key's samples and acquisitions.
func indexStates(states []KeyState, acqs []Acquisition) stateIndex {
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
				if token := tokenOf(s.Value); token != "" {
					owner[token] = a
				}
			}
		}
	}
	return stateIndex{leases: leases, queued: queued, owner: owner}
}

// heldValue is what heldBy makes of one sampled value: its token, the
// acquisition whose lease it is when one reported it (reported), whether
// a release handed it over (handed) as a provisional value stating no
// more than the claim window (provisional), and for the detail who
// claimed it and when (claimed).
type heldValue struct {
	token                         string
	holder                        Acquisition
	reported, handed, provisional bool
	claimed                       string
}

// read reads states[i], whose value states expiry.
func (x stateIndex) read(states []KeyState, i int, expiry int64, b Bounds) heldValue {
	s := states[i]
	leases, owner, queued := x.leases, x.owner, x.queued
	token := tokenOf(s.Value)
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
	return heldValue{token: token, holder: holder, reported: reported, handed: handed, provisional: provisional, claimed: claimed}
}

// tokenOf reads a lock value's owner token as the library does (its
// value.go): the bytes between the value's first ':' and the first '|'
// after it, where the holder's identity begins, or the value's end.
func tokenOf(value string) string {
	_, rest, _ := strings.Cut(value, ":")
	token, _, _ := strings.Cut(rest, "|")
	return token
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
