package setnxlock

import (
	"context"
	"errors"
	"fmt"
)

// Do runs work under a lock, and gets its bookkeeping right whatever the
// work does: it takes the lock, keeps it, and gives it back.

// Do acquires the lock on key, waiting until ctx ends as Acquire does,
// then runs fn under it and releases it when fn returns, and also when fn
// panics (the panic then goes on, once the lock is released).
//
// While fn runs, the lease is renewed in the background whatever the
// Locker's options (as WithAutoRefresh renews it), and fn's context is
// the lock's (Lock.Context): it is cancelled when the lock is lost, with a
// cause matching ErrNotHeld, and when ctx ends. A holder must stop its
// work when that context ends: the renewal keeps a live holder's lease,
// but it cannot keep a holder cut off from Redis past its lease's end
// (H8, H11).
//
// Do returns fn's error. If the lock was lost while fn ran, its error
// also matches ErrNotHeld (and is that loss alone when fn returned nil);
// a release that failed after fn is reported too, joined to fn's error.
// If Acquire fails, fn is not run and Do returns Acquire's error (it
// matches ErrNotAcquired and ctx's error when ctx ends first). Nothing of
// the lock outlives the call once the release is confirmed; a release
// whose every try failed in transit renews nothing after Do returns, and
// the lease ends by the clock (Done closes then). A nil fn is
// ErrInvalidArgument, and nothing is written to Redis.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("%w: Do %q: fn is nil", ErrInvalidArgument, key)
	}
	lock, err := l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	return lock.do(ctx, fn)
}

// doReleaseTries bounds how often Do tries to release after fn: again
// after a failure in transit (the key may still be ours; a resent release
// that finds it gone answers nil, H5).
const doReleaseTries = 3

// do runs fn under k for Do: renewed while fn runs, released after it.
func (k *Lock) do(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	k.renewAlways.Store(true) // before the keeper starts, or before it next wakes
	k.startKeeper()
	k.nudgeKeeper()
	workCtx, cancel := context.WithCancel(k.Context(ctx))
	defer func() {
		// fn returned or panicked: its context ends first, so that nothing
		// it started believes it still holds the lock, then the lock is
		// given back, then the panic, if any, goes on.
		recovered := recover()
		cancel()
		err = errors.Join(err, k.lossOrRelease(ctx))
		if recovered != nil {
			panic(recovered)
		}
	}()
	return fn(workCtx)
}

// lossOrRelease releases k after Do's fn returned: nil once released,
// the loss (matching ErrNotHeld) if the lock was lost while fn ran, or the
// last release error after doReleaseTries tries in transit. The release
// does not honour ctx's end (fn may have returned because ctx ended), but
// each try returns at the lease's end at the latest (H11).
func (k *Lock) lossOrRelease(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	var err error
	for range doReleaseTries {
		err = k.Release(ctx)
		if err == nil || errors.Is(err, ErrNotHeld) {
			return err
		}
	}
	return err
}
