package setnxlock

import "time"

// What a Locker believes of a lease's end, by its clock. A lease states its
// end in the key; clocks disagree (H4), and a clock that knows how far it
// may be from the time it follows (ServerClock's Uncertainty) says by how
// much. The holder believes less and a reader waits more: our own lease
// ends, for us, its clock's uncertainty before the end it states, and a
// foreign lease may be taken over only the skew margin plus our clock's
// uncertainty after it. Two Lockers whose clocks' errors are within their
// stated uncertainties therefore never hold a key at the same time, and
// between one's belief ending and the other's takeover lies at least the
// reader's skew margin.

// ourLeaseEnd is the end we believe, judged at now, of a lease of ours
// that states it ends at stated: earlier by our clock's uncertainty, as it
// will have grown by then at the assumed drift rate (clockDrift).
func (l *Locker) ourLeaseEnd(stated, now time.Time) time.Time {
	u := uncertaintyOf(l.cfg.clock)
	if u == 0 {
		return stated
	}
	return stated.Add(-u - drift(max(stated.Sub(now), 0)))
}

// takeableAt is the instant by our clock from which a foreign lease held
// until heldUntil (see heldUntil) may be taken over: after the skew margin
// and our clock's uncertainty.
func (l *Locker) takeableAt(heldUntil time.Time) time.Time {
	return heldUntil.Add(l.cfg.skewMargin + uncertaintyOf(l.cfg.clock))
}

// expired reports whether a lease ending at expiry is over at now. The SETNX
// page's rule: a timestamp <= the current time is no longer valid.
func expired(expiry, now time.Time) bool {
	return !expiry.After(now)
}
