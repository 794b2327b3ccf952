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
)

// supervise runs the command while the lease is kept, and returns run's
// exit status. Invariants: the command runs only while the lock was ours
// when it started; it is in a process group of its own, which receives the
// forwarded signals and, once the lease is lost or --max-runtime runs out,
// SIGTERM then SIGKILL after --kill-grace; the lock is given up, or left to
// end at the --min-hold instant, only after the command's leader exited.
func supervise(opts runOptions, lock *setnxlock.Lock, sigs <-chan os.Signal, out *reporter) int {
	acquiredAt := time.Now()
	keeper := keepLease(lock, opts.ttl, out)

	cmd := exec.Command(opts.argv[0], opts.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envKey+"="+opts.key, envExpiresAt+"="+stamp(lock.ExpiresAt()))
	if opts.fencing {
		cmd.Env = append(cmd.Env, envFencingToken+"="+strconv.FormatInt(lock.FencingToken(), 10))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd)
	if err := startCommand(cmd); err != nil {
		keeper.Stop()
		releaseQuietly(lock)
		out.warn("cannot run %q: %v", opts.argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExecute
	}
	group := cmd.Process.Pid // Setpgid: the group's id is the leader's pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var maxRuntime <-chan time.Time
	if opts.maxRuntime > 0 {
		timer := time.NewTimer(opts.maxRuntime)
		defer timer.Stop()
		maxRuntime = timer.C
	}
	var killed int               // exitLost or exitMaxRuntime once the kill sequence started
	var sigkill <-chan time.Time // the end of --kill-grace, once started
	startKill := func(why int, format string, args ...any) {
		if killed != 0 {
			return
		}
		killed = why
		out.warn(format+": SIGTERM to the command, SIGKILL after %v", append(args, opts.killGrace)...)
		_ = syscall.Kill(-group, syscall.SIGTERM)
		sigkill = time.After(opts.killGrace)
	}
	lost := lock.Done()
	var waitErr error
wait:
	for {
		select {
		case waitErr = <-exited:
			break wait
		case s := <-sigs:
			out.say("forwarding %v to the command", s)
			_ = syscall.Kill(-group, s.(syscall.Signal))
		case <-lost:
			lost = nil
			startKill(exitLost, "lease lost (%v)", lock.Err())
		case <-maxRuntime:
			maxRuntime = nil
			startKill(exitMaxRuntime, "--max-runtime %v ran out", opts.maxRuntime)
		case <-sigkill:
			sigkill = nil
			_ = syscall.Kill(-group, syscall.SIGKILL)
		}
	}
	if killed != 0 {
		reapGroup(group, sigkill)
	}
	code := exitStatus(waitErr, cmd)
	keeper.Stop()
	out.say("command exited with status %d", code)
	return finish(opts, lock, acquiredAt, killed, code, out)
}

// reapGroup waits, until the kill grace ends, for the rest of the
// command's process group to leave after its leader, then SIGKILLs what
// remains: nothing of a killed command outlives its lease.
func reapGroup(group int, sigkill <-chan time.Time) {
	for syscall.Kill(-group, 0) == nil {
		if sigkill == nil { // the grace has ended already
			_ = syscall.Kill(-group, syscall.SIGKILL)
			return
		}
		timer := time.NewTimer(20 * time.Millisecond)
		select {
		case <-sigkill:
			timer.Stop()
			sigkill = nil
		case <-timer.C:
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
func finish(opts runOptions, lock *setnxlock.Lock, acquiredAt time.Time, killed, code int, out *reporter) int {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if killed == exitLost || lock.Err() != nil {
		if killed != exitLost {
			out.warn("lease lost while the command ran (%v)", lock.Err())
		}
		_ = lock.Release(ctx) // deletes our value if still there, as a courtesy
		return exitLost
	}
	if killed == exitMaxRuntime {
		code = exitMaxRuntime
	}
	if hold := time.Until(acquiredAt.Add(opts.minHold)); hold >= time.Millisecond {
		// The lease is left to end then, with no process kept alive for it;
		// other clients take the key over after that instant.
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
