package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/setnxlock/setnxlock"
)

// The environment variables the command gets.
const (
	envKey          = "SETNXLOCK_KEY"
	envExpiresAt    = "SETNXLOCK_EXPIRES_AT"
	envFencingToken = "SETNXLOCK_FENCING_TOKEN"
	envSemaphore    = "SETNXLOCK_SEMAPHORE" // with --permits: the semaphore's name; SETNXLOCK_KEY is the permit's key
)

// supervise runs the command while the Locker's keeper renews the lease
// (WithAutoRefresh, every TTL/3), and returns run's
// exit status. Invariants: the command runs only while the lock was ours
// when it started; it is in a process group of its own, which receives the
// forwarded signals; the group is gone by the end of the lease by our
// clock (killSchedule), and gets SIGTERM then SIGKILL after --kill-grace
// once the lease is lost or --max-runtime runs out; the lock is given up,
// or left to end at the --min-hold instant, only once no process of the
// group runs: by default setnxlock keeps renewing until the processes the
// command left behind exit, with --kill-descendants it kills them.
func supervise(opts runOptions, lock *setnxlock.Lock, sigs <-chan os.Signal, out *reporter) int {
	acquiredAt := time.Now()

	cmd := exec.Command(opts.argv[0], opts.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envKey+"="+lock.Key(), envExpiresAt+"="+stamp(lock.ExpiresAt()))
	if opts.permits > 0 {
		cmd.Env = append(cmd.Env, envSemaphore+"="+opts.key)
	}
	if opts.fencing {
		cmd.Env = append(cmd.Env, envFencingToken+"="+strconv.FormatInt(lock.FencingToken(), 10))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd)
	if err := startCommand(cmd); err != nil {
		releaseQuietly(lock)
		out.warn("cannot run %q: %v", opts.argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExecute
	}
	exited, reap := waitLeader(cmd)
	killed := superviseGroup(opts, lock, cmd.Process.Pid, exited, sigs, out)
	code := exitStatus(reap(), cmd)
	out.say("command exited with status %d", code)
	return finish(opts, lock, acquiredAt, killed, code, out)
}

// killReason is why the group is being killed; it decides run's status.
type killReason int

const (
	notKilled      killReason = iota
	killLost                  // the lease was lost, or ends with no renewal confirmed: exit 75
	killMaxRuntime            // --max-runtime ran out: exit 124
	killLeftovers             // --kill-descendants after the leader's exit: the leader's status
)

// superviseGroup forwards signals to the group led by leader and kills it when
// it must, and returns once the leader has exited and no process of its
// group runs; it says why the group was killed, if it was.
func superviseGroup(opts runOptions, lock *setnxlock.Lock, group int, exited <-chan struct{}, sigs <-chan os.Signal, out *reporter) killReason {
	var maxRuntime <-chan time.Time
	if opts.maxRuntime > 0 {
		timer := time.NewTimer(opts.maxRuntime)
		defer timer.Stop()
		maxRuntime = timer.C
	}
	g := newGroupKill(opts, lock, group, out)
	defer g.deadline.Stop()
	lost := lock.Done()
	for {
		select {
		case <-exited:
			exited = nil
			if g.leaderExit(opts.killDescendants) {
				return g.killed
			}
		case <-g.probeAt:
			if g.look() {
				return g.killed
			}
		case s := <-sigs:
			out.say("forwarding %v to the command's process group", s)
			signalGroup(group, s.(syscall.Signal))
			g.lookSoon()
		case <-lost:
			lost = nil
			g.start(killLost, "lease lost (%v)", lock.Err())
		case <-maxRuntime:
			maxRuntime = nil
			g.start(killMaxRuntime, "--max-runtime %v ran out", opts.maxRuntime)
		case <-g.deadline.C:
			g.due() // re-reads the lease's end: a renewal confirmed meanwhile moved it forward
		}
	}
}

// exitStatus is the command's status as a shell reports it: its exit code,
// or 128+N when it died of signal N.
func exitStatus(waitErr error, cmd *exec.Cmd) int {
	if status, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && status.Signaled() {
		return exitSignalBase + int(status.Signal())
	}
	if waitErr != nil && cmd.ProcessState.ExitCode() < 0 {
		return exitCannotExecute
	}
	return cmd.ProcessState.ExitCode()
}

// finish gives the lock up after the command, or with --min-hold leaves a
// lease that ends minHold after the acquisition, and settles the status:
// 75 whenever the lease turns out lost, 124 after --max-runtime, else the
// command's own.
func finish(opts runOptions, lock *setnxlock.Lock, acquiredAt time.Time, killed killReason, code int, out *reporter) int {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if killed == killLost || lock.Err() != nil {
		if killed != killLost {
			out.warn("lease lost while the command ran (%v)", lock.Err())
		}
		_ = lock.Release(ctx) // deletes our value if still there, as a courtesy
		return exitLost
	}
	if killed == killMaxRuntime {
		code = exitMaxRuntime
	}
	if hold := time.Until(acquiredAt.Add(opts.minHold)); hold >= time.Millisecond {
		// The lease is left to end then, with no process kept alive for it;
		// other clients take the key over after that instant. Orphan first:
		// no renewal lands after the Refresh that sets the end.
		lock.Orphan()
		err := lock.Refresh(ctx, hold)
		switch {
		case err == nil:
			out.say("--min-hold: the lease is left to end at %s", stamp(lock.ExpiresAt()))
			return code
		case errors.Is(err, setnxlock.ErrNotHeld):
			out.warn("lease lost while the command ran (%v)", err)
			return exitLost
		}
		out.warn("--min-hold: could not move the lease's end (%v); it ends at %s", err, stamp(lock.ExpiresAt()))
		return code
	}
	switch err := lock.Release(ctx); {
	case errors.Is(err, setnxlock.ErrNotHeld):
		out.warn("lease lost while the command ran: another client may have held the lock meanwhile (%v)", err)
		return exitLost
	case err != nil:
		out.warn("release failed; the lease ends by itself at %s: %v", stamp(lock.ExpiresAt()), err)
	}
	return code
}
