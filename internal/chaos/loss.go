package chaos

import (
	"fmt"
	"slices"
	"time"
)

// Work after loss (H11): a holder that works until its lock tells it of a
// loss (LockerConfig.UntilLost) relies on the library alone to stop in
// time. Its lease ends, by its own clock, at the end the Lock stated (at
// the signal, ToldEnd; otherwise at its last check, LeaseEnd); from then
// on another client may hold the key. The holder may go on working past
// that end no longer than Bounds.LossSlack, the time to schedule it once
// told; time its process was stopped (SIGSTOP) or the machine stalled is
// not its library's to shorten and is not counted. A partition that cuts
// the holder off from Redis is counted: the library must signal the loss
// at the lease's end whatever its round trips are doing.
//
// A goroutine client's stall is the harness holding its loop's write to
// the resource (clients.go): the loop is held, its Lock and its loss
// watch are not, so a signal during the stall is on record at its true
// instant (Told) once the loop reports it, and nothing is excused for a
// told holder. A holder the run stopped while a stall still held its
// loop could not report at all: it was last seen working untold when the
// stall began, and is charged until then; charging it until the run's
// end would count the harness's own stall as its work. A holder whose
// stall ended and that then left untold was untold all along, and is
// charged in full.

// lossSignals checks the sections of the key's holders that work until
// told, and records the gap from each one's lease end to its loss signal.
// pause is when the machine stalled (or a server was down); frozen, by
// process, when a client process was stopped; held, by loop, when the
// harness held a goroutine client's loop (a stall).
func (r *Report) lossSignals(key string, acqs []Acquisition, end time.Time, pause []Interval, frozen, held map[string][]Interval, b Bounds) {
	if b.UntilLost == nil {
		return
	}
	for _, a := range acqs {
		group := b.UntilLost(a.Client)
		if group == "" || a.Entered.IsZero() {
			continue
		}
		excused := merged(slices.Concat(pause, frozen[processOf(a.Client)]))
		leaseEnd := a.LeaseEnd
		if !a.Told.IsZero() {
			leaseEnd = a.ToldEnd
			if r.LossGaps == nil {
				r.LossGaps = map[string][]time.Duration{}
			}
			gap := a.Told.Sub(a.ToldEnd) - downtime(excused, a.ToldEnd, a.Told)
			r.LossGaps[group] = append(r.LossGaps[group], gap)
		}
		stopped := earliestSet(a.Told, a.Released, a.Crashed, a.Killed, end) // it worked, untold, until then
		if a.Told.IsZero() {
			stopped = heldFrom(held[a.Client], stopped)
		}
		if !stopped.After(leaseEnd) {
			continue
		}
		if over := stopped.Sub(leaseEnd) - downtime(excused, leaseEnd, stopped); over > b.LossSlack {
			how := "it was told of the loss"
			if a.Told.IsZero() {
				how = "it left its section untold"
			}
			r.Violations = append(r.Violations, Violation{Kind: WorkAfterLoss, Key: key, First: a.ID(),
				Detail: fmt.Sprintf("worked %s past its lease's end by its own clock before %s, slack %s", over, how, b.LossSlack)})
		}
	}
}

// earliestSet is the earliest of the instants that are not zero, or the
// zero time if all are.
func earliestSet(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if !t.IsZero() && (out.IsZero() || t.Before(out)) {
			out = t
		}
	}
	return out
}

// heldFrom is when the stall of held that was still holding its loop at
// stopped began: the last instant the loop was seen, working; stopped
// itself when no stall was holding it then.
func heldFrom(held []Interval, stopped time.Time) time.Time {
	for _, i := range held {
		if i.From.Before(stopped) && !stopped.After(i.To) {
			return i.From
		}
	}
	return stopped
}
