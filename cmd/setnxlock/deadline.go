package main

import "time"

// killSchedule says when the command's process group is signalled so that
// it is gone by the end of the lease as the holder's clock reads it (H11),
// whatever the renewal in flight is doing: SIGTERM at termAt unless a
// confirmed renewal has moved the lease's end (lock.ExpiresAt) by then,
// SIGKILL by killAt at the latest. A lease that ends is treated as lost
// (exit 75), even if a renewal confirms after the SIGTERM.
type killSchedule struct {
	// grace is --kill-grace: between SIGTERM and SIGKILL when the kill
	// starts for a loss Redis reported, --max-runtime or
	// --kill-descendants, though never past killAt.
	grace time.Duration
	// leaseGrace is the grace of a kill for the lease's end: --kill-grace
	// capped at TTL/3 minus margin, so that the SIGTERM comes no earlier
	// than two thirds into a lease, leaving the renewals the middle third
	// (a default run --ttl 3s gets 850ms).
	leaseGrace time.Duration
	// margin is kept between SIGKILL and the lease's end, for the kill to
	// take effect and the group to be seen gone.
	margin time.Duration
}

// maxKillMargin caps the margin of long leases.
const maxKillMargin = 250 * time.Millisecond

func newKillSchedule(ttl, grace time.Duration) killSchedule {
	margin := min(ttl/20, maxKillMargin)
	return killSchedule{grace: grace, leaseGrace: min(grace, ttl/3-margin), margin: margin}
}

// termAt is when the group gets SIGTERM if the lease still ends at expires.
func (s killSchedule) termAt(expires time.Time) time.Time {
	return expires.Add(-s.margin - s.leaseGrace)
}

// killAt is the latest SIGKILL for a lease that ends at expires.
func (s killSchedule) killAt(expires time.Time) time.Time { return expires.Add(-s.margin) }

// sigkillAt is when a kill that started with SIGTERM at started sends
// SIGKILL: after the grace, and no later than killAt.
func (s killSchedule) sigkillAt(started, expires time.Time) time.Time {
	at := started.Add(s.grace)
	if end := s.killAt(expires); end.Before(at) {
		return end
	}
	return at
}
