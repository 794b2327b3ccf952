package chaos

import (
	"strconv"
	"strings"
	"time"
)

// Claims in doubt: a claim after a handoff that the heard mode's faults
// delayed past its client's read timeout, or whose reply they lost, may
// have written its lease with nobody knowing it owns it. With claims in
// the background (a handoff is a provisional hold) its Acquire has long
// returned, so the call's own trace cannot say so (Call.InDoubt); the
// client reports the claim when it lands, and the liveness checks count
// such a lease like any write in doubt.

// Doubt is one claim a fault may have landed unknown to its client: when
// it reached the server (or was sent, its reply lost), and the key it
// claims.
type Doubt struct {
	Client string
	Key    string
	At     time.Time
}

// claimInDoubt is the report a client's claim faults make (claimFaults'
// report) when a claim lands that way; the worker sends it as
// "doubt <key> <at>" on its events connection.
const claimInDoubt = "doubt"

// doubt records a claim in doubt reported as "<key> <at>".
func (r *recorder) doubt(client, report string) {
	key, at, ok := strings.Cut(report, " ")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.doubts = append(r.doubts, Doubt{Client: client, Key: key, At: time.Unix(0, n)})
	}
}

// doubtSpans are, by key, the spans in which a claim in doubt may have
// held it: from its landing to the end of a lease of its client and the
// takeover after.
func doubtSpans(doubts []Doubt, b Bounds) map[string][]Interval {
	out := map[string][]Interval{}
	for _, d := range doubts {
		out[d.Key] = append(out[d.Key], Interval{From: d.At, To: d.At.Add(b.lease(d.Client) + b.Takeover)})
	}
	return out
}

// within reports whether any span overlaps [from, to].
func within(spans []Interval, from, to time.Time) bool {
	for _, s := range spans {
		if s.From.Before(to) && s.To.After(from) {
			return true
		}
	}
	return false
}
