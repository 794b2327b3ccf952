package main

import (
	"fmt"
	"syscall"
	"time"

	"github.com/setnxlock/setnxlock"
)

// groupKill is superviseGroup's state: whether and why the command's
// process group is being killed, the timer of the schedule's next step,
// and, once the leader has exited, when to look whether the group has
// emptied. Invariant: deadline is armed for the schedule's next step as
// computed from the lease's current end (arm), and re-reads that end when
// it fires (due), so a renewal confirmed meanwhile only moves it later.
type groupKill struct {
	lock     *setnxlock.Lock
	group    int
	out      *reporter
	schedule killSchedule

	killed      killReason
	killStarted time.Time // when SIGTERM went to the group
	sigkilled   bool
	deadline    *time.Timer // the SIGTERM of a lease about to end, or the SIGKILL of a kill under way

	probe        groupProbe
	probeAt      <-chan time.Time // once the leader has exited: when to look whether the group has emptied
	leaderExited bool
}

func newGroupKill(opts runOptions, lock *setnxlock.Lock, group int, out *reporter) *groupKill {
	g := &groupKill{lock: lock, group: group, out: out, schedule: newKillSchedule(opts.ttl, opts.killGrace),
		deadline: time.NewTimer(time.Hour), probe: groupProbe{group: group}}
	g.arm()
	return g
}

// arm sets the deadline for the schedule's next step.
func (g *groupKill) arm() {
	switch expires := g.lock.ExpiresAt(); {
	case g.killed == notKilled:
		g.deadline.Reset(time.Until(g.schedule.termAt(expires)))
	case !g.sigkilled:
		g.deadline.Reset(time.Until(g.schedule.sigkillAt(g.killStarted, expires)))
	default:
		g.deadline.Stop()
	}
}

// lookSoon is called when the group was just signalled.
func (g *groupKill) lookSoon() {
	if g.leaderExited {
		g.probe.soon()
		g.probeAt = time.After(g.probe.next())
	}
}

// start kills the group for why, once: SIGTERM now, SIGKILL by the schedule.
func (g *groupKill) start(why killReason, format string, args ...any) {
	if g.killed != notKilled {
		return
	}
	g.killed, g.killStarted = why, time.Now()
	at := g.schedule.sigkillAt(g.killStarted, g.lock.ExpiresAt())
	line := fmt.Sprintf(format, args...) + ": SIGTERM to the command's process group, SIGKILL at " + stamp(at)
	if why == killLeftovers {
		g.out.say("%s", line)
	} else {
		g.out.warn("%s", line)
	}
	signalGroup(g.group, syscall.SIGTERM)
	g.lookSoon()
	g.arm()
}

// due is the deadline firing: the schedule's step, if the lease's current
// end still calls for it, then the next.
func (g *groupKill) due() {
	now := time.Now()
	expires := g.lock.ExpiresAt()
	switch {
	case g.killed == notKilled && !now.Before(g.schedule.termAt(expires)):
		// H11: no renewal confirmed in time, whatever is in flight.
		g.start(killLost, "no renewal confirmed: the lease ends at %s", stamp(expires))
	case g.killed != notKilled && !g.sigkilled && !now.Before(g.schedule.sigkillAt(g.killStarted, expires)):
		g.sigkilled = true
		signalGroup(g.group, syscall.SIGKILL)
		g.lookSoon()
	}
	g.arm()
}

// leaderExit follows the leader's exit, and reports whether the group has
// emptied with it; with killDescendants what it left behind is killed.
func (g *groupKill) leaderExit(killDescendants bool) (emptied bool) {
	g.leaderExited = true
	if !g.probe.running() {
		return true
	}
	g.probeAt = time.After(g.probe.next())
	if killDescendants {
		g.start(killLeftovers, "the command exited, leaving processes in its group")
	} else {
		g.out.say("the command exited; the lock is held until the rest of its process group exits")
	}
	return false
}

// look reports whether the group has emptied, and looks again later if not.
func (g *groupKill) look() (emptied bool) {
	if !g.probe.running() {
		return true
	}
	g.probeAt = time.After(g.probe.next())
	return false
}
