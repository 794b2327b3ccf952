package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/setnxlock/setnxlock"
)

// runCommand is setnxlock run: take the lock (or, with --permits, a
// permit of the semaphore), run the command under it, give it up.
func runCommand(args []string, stdout, stderr io.Writer) (int, error) {
	opts, help, err := parseRun(args, stdout)
	if err != nil || help {
		return exitOK, err
	}
	// Caught before anything is sent, so that no signal finds a wait or a
	// lease without us cleaning up.
	sigs := make(chan os.Signal, 8)
	catchSignals(sigs)
	defer signal.Stop(sigs)

	client, err := newClient(opts.url)
	if err != nil {
		return exitOK, usageIn("run", err)
	}
	defer client.Close()
	out := &reporter{w: stderr, key: opts.key, verbose: opts.verbose}
	lockerOpts := []setnxlock.Option{
		setnxlock.WithTTL(opts.ttl), setnxlock.WithFormat(opts.format), setnxlock.WithObserver(out),
		setnxlock.WithAutoRefresh(), // the lease is renewed every TTL/3 until Release, or Orphan (--min-hold)
	}
	if opts.fencing {
		lockerOpts = append(lockerOpts, setnxlock.WithFencing())
	}
	locker, err := setnxlock.New(client, lockerOpts...)
	if err != nil {
		return exitOK, usageIn("run", err)
	}
	defer locker.Close() // no subscription outlives the run
	target, err := newAcquirer(opts, locker)
	if err != nil {
		return exitOK, err
	}

	lock, code := acquire(opts, target, sigs, out)
	if lock == nil {
		return code, nil
	}
	return supervise(opts, lock, sigs, out), nil
}

// acquire takes the lock, or a permit: one attempt, which must reach
// Redis (exit 69 otherwise), then, unless -n, a wait that -w bounds and
// the forwarded signals end. It returns the lock, or nil and the exit
// status.
func acquire(opts runOptions, target acquirer, sigs <-chan os.Signal, out *reporter) (*setnxlock.Lock, int) {
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopWatch := watchSignals(sigs, cancel)

	lock, err := target.TryAcquire(ctx)
	if errors.Is(err, setnxlock.ErrNotAcquired) && !opts.nonblock {
		out.say("waiting")
		waitCtx := ctx
		if opts.waitSet {
			var cancelWait context.CancelFunc
			waitCtx, cancelWait = context.WithDeadline(ctx, start.Add(opts.wait))
			defer cancelWait()
		}
		lock, err = target.Acquire(waitCtx)
		if err == nil {
			err = ownLease(waitCtx, lock, opts.ttl)
		}
	}
	if s := stopWatch(); s != nil {
		if lock != nil { // won as the signal came: give it back
			releaseQuietly(lock)
		}
		out.say("interrupted by %v while waiting", s)
		return nil, exitSignalBase + int(s.(syscall.Signal))
	}
	switch {
	case err == nil:
		return lock, exitOK
	case errors.Is(err, setnxlock.ErrPermitsMismatch):
		out.warn("--permits %d disagrees with the count recorded in Redis; nothing written (every client must give the same count; 'setnxlock semaphore resize' changes it): %v", opts.permits, err)
		return nil, exitPermitsMismatch
	case allForeign(target, err):
		out.warn("the key holds something that is not a lock value; left alone: %v", err)
		return nil, exitForeignKey
	case errors.Is(err, setnxlock.ErrNotAcquired):
		if errors.Is(err, setnxlock.ErrNotLockValue) { // a semaphore, some of whose permit keys are foreign
			out.warn("some permit keys hold something that is not a lock value; left alone: %v", err)
		}
		out.say("not acquired (%v): exit %d", err, opts.conflict)
		return nil, opts.conflict
	}
	what := "the lock"
	if opts.permits > 0 {
		what = "a permit"
	}
	out.warn("cannot take %s at %s: %v", what, redactURL(opts.url), err)
	return nil, exitUnavailable
}

// ownLease gives a lock that Acquire returned a lease of the run's own
// TTL before the command starts. A lock handed over by a release is held
// on the release's provisional value until its claim, sent in the
// background, is confirmed: a lease of 250ms at most, shorter than the
// kill schedule's grace, which would signal the command at once. The
// Refresh waits for that claim and moves the lease to the full TTL; a
// claim that failed is a lock not acquired.
func ownLease(ctx context.Context, lock *setnxlock.Lock, ttl time.Duration) error {
	if err := lock.Refresh(ctx, ttl); err != nil {
		releaseQuietly(lock)
		return fmt.Errorf("%w: the lock handed over was lost before the command started: %w", setnxlock.ErrNotAcquired, err)
	}
	return nil
}

// watchSignals ends the wait (cancel) on a signal. The returned stop ends
// the watch and says which signal came, if one did; it is called before
// the command starts, so that from then on every signal is forwarded.
func watchSignals(sigs <-chan os.Signal, cancel context.CancelFunc) (stop func() os.Signal) {
	interrupted := make(chan os.Signal, 1)
	stopWatching := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigs:
			interrupted <- s
			cancel()
		case <-stopWatching:
		}
	}()
	return func() os.Signal {
		close(stopWatching)
		<-watched // bounded: the watcher returns as soon as stopWatching is closed
		select {
		case s := <-interrupted:
			return s
		default:
			return nil
		}
	}
}

// releaseQuietly gives up a lock that will not be used, within a bound.
func releaseQuietly(lock *setnxlock.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = lock.Release(ctx)
}

// releaseTimeout bounds each round trip run makes after the command ended.
const releaseTimeout = 5 * time.Second
