package chaos

import (
	"fmt"
	"slices"
)

// The safety checks of one key's history: critical sections that overlap,
// fencing tokens out of order, and the fence letting a stale holder back in.

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
