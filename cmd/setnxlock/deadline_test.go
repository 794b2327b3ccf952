package main

import (
	"testing"
	"time"
)

// The kill for a lease about to end lands before the lease's end (H11):
// SIGKILL a margin before it, SIGTERM the grace before that, with the
// grace cut so that SIGTERM comes no earlier than two thirds into the
// lease; a kill started for another reason keeps its full grace but never
// sends SIGKILL past that instant.
func TestTheKillScheduleEndsBeforeTheLease(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ttl, grace, leaseGrace time.Duration
	}{
		{30 * time.Second, 5 * time.Second, 5 * time.Second},
		{3 * time.Second, 5 * time.Second, time.Second - 150*time.Millisecond}, // a default run --ttl 3s
		{time.Second, 100 * time.Millisecond, 100 * time.Millisecond},
		{3 * time.Millisecond, 5 * time.Second, time.Millisecond - 150*time.Microsecond},
		{time.Hour, 0, 0},
	} {
		s := newKillSchedule(c.ttl, c.grace)
		start := time.Unix(1000, 0)
		end := start.Add(c.ttl)
		if s.leaseGrace != c.leaseGrace {
			t.Errorf("ttl %v, grace %v: a lease's end gets a grace of %v, want %v", c.ttl, c.grace, s.leaseGrace, c.leaseGrace)
		}
		if kill := s.killAt(end); !kill.Before(end) || kill.Before(end.Add(-maxKillMargin)) {
			t.Errorf("ttl %v: SIGKILL at %v, want within %v before the end %v", c.ttl, kill, maxKillMargin, end)
		}
		if term := s.termAt(end); term.Sub(start) < 2*c.ttl/3 || !term.Equal(s.killAt(end).Add(-s.leaseGrace)) {
			t.Errorf("ttl %v, grace %v: SIGTERM at %v after the start, want the grace before SIGKILL and at least 2/3 into the lease",
				c.ttl, c.grace, term.Sub(start))
		}
		if at := s.sigkillAt(start, end); at.After(s.killAt(end)) || at.After(start.Add(c.grace)) {
			t.Errorf("ttl %v, grace %v: a kill started with the lease sends SIGKILL at %v", c.ttl, c.grace, at.Sub(start))
		}
		if late := end.Add(time.Second); !s.sigkillAt(late, end).Equal(s.killAt(end)) {
			t.Errorf("ttl %v: a kill started after the lease's end waits for SIGKILL", c.ttl)
		}
	}
}
