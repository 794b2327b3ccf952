package main

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// The command runs as the leader of a process group of its own (Setpgid),
// and everything it starts stays in that group unless it leaves with
// setsid or setpgid. The lock is held until no process of the group runs,
// as flock(1)'s is until every process holding its descriptor has exited;
// a process that left the group is neither waited for nor killed. The
// group's id is the leader's pid, which the kernel does not hand out again
// while any process of the group remains, so signals to the group reach
// only it as long as it has members.

// signalGroup sends sig to every process of the group; an empty group is
// not an error.
func signalGroup(group int, sig syscall.Signal) {
	_ = syscall.Kill(-group, sig)
}

// waitLeader reaps the leader as soon as it exits: exited is closed then,
// and reap returns cmd.Wait's result.
func waitLeader(cmd *exec.Cmd) (exited <-chan struct{}, reap func() error) {
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = cmd.Wait()
	}()
	return done, func() error { <-done; return err }
}

// groupProbe tells, once the leader has exited, whether a process of its
// group still runs. kill(-group, 0) answers at once when the group is
// empty, the common case; but it counts zombies, which have exited and
// wait for their parent, or init, to reap them (where init does not, as in
// some containers, they would hold the lock for ever), so while members
// remain the watch also asks whether they are all zombies: a scan of /proc
// (Linux), which costs milliseconds and is made less and less often as the
// group lingers.
type groupProbe struct {
	group     int
	every     time.Duration // until the next look
	scanEvery time.Duration // between zombie scans
	scanAt    time.Time     // the next zombie scan
}

const (
	minGroupLook  = 5 * time.Millisecond
	maxGroupLook  = 250 * time.Millisecond
	minZombieScan = 20 * time.Millisecond
	maxZombieScan = 8 * time.Second
)

// running reports whether a process of the group runs.
func (p *groupProbe) running() bool {
	if errors.Is(syscall.Kill(-p.group, 0), syscall.ESRCH) {
		return false
	}
	now := time.Now()
	if now.Before(p.scanAt) {
		return true
	}
	p.scanEvery = min(max(2*p.scanEvery, minZombieScan), maxZombieScan)
	p.scanAt = now.Add(p.scanEvery)
	return !onlyZombies(p.group)
}

// next returns the wait before the next look, and lengthens the one after.
func (p *groupProbe) next() time.Duration {
	d := max(p.every, minGroupLook)
	p.every = min(2*d, maxGroupLook)
	return d
}

// soon makes the next looks and scans quick again: the group was just
// signalled.
func (p *groupProbe) soon() {
	p.every, p.scanEvery, p.scanAt = 0, 0, time.Time{}
}
