package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// A semaphore of N permits is N lock keys, PermitKey(name, 0) to
// PermitKey(name, N-1), each an ordinary lock: a permit is held exactly as
// a lock is (the page's SETNX, the GETSET takeover of a crashed holder's
// expired lease, H1–H11 alike), and it is a *Lock, with everything a Lock
// does. At most one lease lives on each permit key, so at most N holders
// hold permits while every client agrees on N; the count is recorded at
// PermitsKey(name) and checked before every acquisition (semaphorecount.go).
//
// Waiting is the lock's waiting. Where the Locker queues, every permit
// names the semaphore's one queue, and an Acquire that finds every permit
// held stands in it once: the release of any permit hands that permit to
// the first in line (semwait.go), so waiters are served in arrival order.
// Where it does not queue (fencing, Cluster, the queue refused), it waits
// on each permit key as Locker.Acquire does (woken or polling), keeps the
// first permit it gets and gives up the others (waitEach).

// Semaphore is a counting semaphore of permits shared by every Locker on
// the same Redis, made by Locker.Semaphore. Its methods are safe for
// concurrent use.
type Semaphore struct {
	locker  *Locker
	name    string
	permits atomic.Int64 // the count this client agrees to; Resize changes it
	next    atomic.Uint64
}

// Semaphore returns the semaphore name with the given number of permits.
// Nothing is sent to Redis: the count is recorded at PermitsKey(name) by
// the first acquisition of any client, and an acquisition with a
// different count fails with ErrPermitsMismatch, writing nothing. An
// empty name, a name whose keys could not share a Redis Cluster slot (it
// starts with '}'), or permits < 1 is ErrInvalidArgument.
//
// Every permit is a lock key of this Locker's options: its TTL, format,
// auto-refresh and fencing (with WithFencing, tokens strictly increase
// across all the permits of the semaphore: they share one counter,
// FenceKey(PermitsKey(name))). All its keys share one Cluster slot.
func (l *Locker) Semaphore(name string, permits int) (*Semaphore, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty semaphore name", ErrInvalidArgument)
	}
	if !hasHashTag(PermitsKey(name)) {
		return nil, fmt.Errorf("%w: semaphore name %q: its keys would not share a Cluster slot", ErrInvalidArgument, name)
	}
	if permits < 1 {
		return nil, fmt.Errorf("%w: semaphore %q: %d permits (at least 1)", ErrInvalidArgument, name, permits)
	}
	s := &Semaphore{locker: l, name: name}
	s.permits.Store(int64(permits))
	return s, nil
}

// PermitKey returns the lock key of the semaphore name's permit i (from
// 0): "{name}.permit.<i>", or name plus ".permit.<i>" when name has a
// Redis Cluster hash tag of its own.
func PermitKey(name string, i int) string {
	return sameSlotKey(name, permitSuffix+strconv.Itoa(i))
}

// permitSuffix follows a semaphore's name in its permits' keys, before the
// permit's index (PermitKey).
const permitSuffix = ".permit."

// PermitsKey returns the key that records the semaphore name's number of
// permits, in the slot of its permits. It has no expiry: like a fence
// counter, it must outlive every permit.
func PermitsKey(name string) string { return sameSlotKey(name, ".permits") }

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the number of permits this client agrees to.
func (s *Semaphore) Permits() int { return int(s.permits.Load()) }

// permitKey is the key of permit i; the Locker draws its fencing tokens
// from the semaphore's one counter.
func (s *Semaphore) permitKey(i int) string {
	key := PermitKey(s.name, i)
	if s.locker.cfg.fencing {
		s.locker.permitFences.LoadOrStore(key, FenceKey(PermitsKey(s.name)))
	}
	if s.locker.queues() {
		s.locker.permitQueues.LoadOrStore(key, permitLine{queue: s.queue(), count: PermitsKey(s.name), index: i}) // one queue for every permit (semwait.go)
	}
	return key
}

// TryAcquire makes one attempt at each permit, from a different one each
// call, and returns the first it wins; a permit that the round trip which
// checks the count found held by a live lease is not tried, so a call that
// finds every permit held costs that one round trip. It returns an error matching
// ErrNotAcquired when every permit is held by a live lease, and
// ErrPermitsMismatch (nothing written) when the recorded count differs
// from this client's. A permit key holding something that is not a lock
// value (H7) is left untouched and the others still serve: the error then
// also matches ErrNotLockValue when no permit was won.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	n, held, err := s.agreeAndLook(ctx, true)
	if err != nil {
		return nil, err
	}
	lock, _, err := s.tryEach(ctx, n, held)
	return lock, err
}

// tryEach tries once each of n permits that the look did not find held
// (agreeAndLook; all of them when held is nil), from a rotating start,
// and says how many hold no lock value (H7).
func (s *Semaphore) tryEach(ctx context.Context, n int, held []bool) (lock *Lock, foreign int, err error) {
	start := int((s.next.Add(1) - 1) % uint64(n))
	var foreignErrs []error
	for j := range n {
		i := (start + j) % n
		if held != nil && held[i] {
			continue
		}
		lock, err := s.locker.TryAcquire(ctx, s.permitKey(i))
		switch {
		case err == nil:
			return lock, 0, nil
		case errors.Is(err, ErrNotLockValue):
			foreignErrs = append(foreignErrs, err)
		case !errors.Is(err, ErrNotAcquired):
			return nil, 0, err
		}
	}
	return nil, len(foreignErrs), s.notAcquired(n, foreignErrs, nil)
}

// notAcquired is the error of an acquisition of none of n permits:
// matching ErrNotAcquired, ErrNotLockValue when some permit key holds no
// lock value (foreign), and the context's error when it ended (ctxErr).
func (s *Semaphore) notAcquired(n int, foreign []error, ctxErr error) error {
	err := fmt.Errorf("%w: semaphore %q: all %d permits are held", ErrNotAcquired, s.name, n)
	switch {
	case ctxErr != nil:
		err = fmt.Errorf("%w: semaphore %q: %w", ErrNotAcquired, s.name, ctxErr)
	case len(foreign) == n:
		err = fmt.Errorf("%w: semaphore %q: no permit key holds a lock value", ErrNotAcquired, s.name)
	}
	if len(foreign) > 0 {
		return errors.Join(err, errors.Join(foreign...))
	}
	return err
}

// Acquire takes a permit, waiting while all are held: once in the
// semaphore's one queue, handed the first permit released (semwait.go),
// or, where the Locker does not queue, on every permit at once as
// Locker.Acquire waits on a key (woken, polling), keeping the first permit
// it gets; a crashed holder's permit is taken over when its lease ends,
// transient network errors are retried. When ctx ends first it
// returns an error matching both ErrNotAcquired and ctx.Err().
// ErrPermitsMismatch: the recorded count differs from this client's, and
// nothing was written. A wait that outlasts a Resize keeps a permit
// handed to it, which its handoff checked against the recorded count
// (protocol.go); a permit its own attempt took after the count changed
// is given back, and the error says so too. Permit keys that hold
// something else (H7) are left untouched and not waited on; when every
// permit does, the error matches ErrNotLockValue.
func (s *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	n, held, err := s.agreeWaiting(ctx)
	if err != nil {
		return nil, err
	}
	lock, foreign, err := s.tryEach(ctx, n, held)
	switch {
	case err == nil:
		return lock, nil
	case ctx.Err() != nil:
		return nil, s.notAcquired(n, nil, ctx.Err())
	case foreign == n:
		return nil, err // nothing to wait for
	case !errors.Is(err, ErrNotAcquired) && !retryable(err):
		return nil, err
	}
	lock, heard, queued, err := s.waitInLine(ctx, n)
	if !queued {
		lock, err = s.waitEach(ctx, n)
	}
	if err != nil || heard {
		// A permit heard was handed on within the recorded count, checked
		// in the handoff's atomic step (protocol.go): kept as a permit live
		// when a Resize came is kept.
		return lock, err
	}
	// The wait may have outlasted a Resize: a permit its own attempt took
	// past a shrunk count must not be kept, or more holders than the
	// recorded count would live. A count that cannot be read now keeps the
	// permit: it was agreed before the wait, the window an attempt always
	// has.
	checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	if _, err := s.agree(checkCtx); errors.Is(err, ErrPermitsMismatch) || errors.Is(err, ErrNotLockValue) {
		return nil, errors.Join(err, s.giveBack(checkCtx, lock))
	}
	return lock, nil
}

// agreeWaiting is agreeAndLook, with the look, for Acquire: a transient
// failure to read the count is tried again after a backoff, until ctx ends
// (then the error matches ErrNotAcquired and ctx.Err()).
func (s *Semaphore) agreeWaiting(ctx context.Context) (int, []bool, error) {
	retry := newBackoff(s.locker.cfg.minBackoff, s.locker.cfg.maxBackoff)
	for {
		n, held, err := s.agreeAndLook(ctx, true)
		switch {
		case err == nil:
			return n, held, nil
		case ctx.Err() != nil:
			return 0, nil, s.notAcquired(s.Permits(), nil, ctx.Err())
		case errors.Is(err, ErrPermitsMismatch), errors.Is(err, ErrNotLockValue), !retryable(err):
			return 0, nil, err
		}
		timer := time.NewTimer(retry.next())
		select {
		case <-ctx.Done():
			timer.Stop()
			return 0, nil, s.notAcquired(s.Permits(), nil, ctx.Err())
		case <-timer.C:
		}
	}
}

// giveBack releases a permit won but not kept, tried again after a
// failure in transit (lossOrRelease), so that it does not stay taken for a
// whole lease with nobody holding it.
func (s *Semaphore) giveBack(ctx context.Context, lock *Lock) error {
	err := lock.lossOrRelease(ctx)
	if errors.Is(err, ErrNotHeld) {
		return nil // already lost: nothing of it is held
	}
	return err
}

// permitWait is the outcome of one permit's Acquire within a semaphore's.
type permitWait struct {
	lock *Lock
	err  error
}

// waitEach, the wait of a Locker that does not queue (waitInLine cannot),
// waits on each of n permits at once (Locker.Acquire) and returns
// the first it wins, as soon as it wins it: the other waits end with their
// context, leaving their queues (which hands on what was handed to them),
// in the background (drain), and a permit they win meanwhile is given
// back, which hands it to the next in line.
func (s *Semaphore) waitEach(ctx context.Context, n int) (*Lock, error) {
	waitCtx, cancel := context.WithCancel(ctx)
	waits := make(chan permitWait, n)
	for i := range n {
		key := s.permitKey(i)
		go func() {
			lock, err := s.locker.Acquire(waitCtx, key)
			waits <- permitWait{lock, err}
		}()
	}
	var (
		failed  error   // the first failure that ends the whole wait
		foreign []error // permits that hold no lock value (H7): not waited on
	)
	for left := n; left > 0; left-- {
		w := <-waits // bounded: every wait returns once waitCtx ends, cancelled below on the first win or failure
		switch {
		case w.err == nil:
			cancel()
			go s.drain(context.WithoutCancel(ctx), waits, left-1)
			return w.lock, nil
		case errors.Is(w.err, ErrNotLockValue):
			foreign = append(foreign, w.err)
		case errors.Is(w.err, ErrNotAcquired) && waitCtx.Err() != nil:
			// ended with ctx, or with the wait's first failure
		case failed == nil:
			failed = w.err
			cancel()
		}
	}
	cancel()
	if failed != nil {
		return nil, failed
	}
	return nil, s.notAcquired(n, foreign, ctx.Err())
}

// drain receives the outcomes of the left waits still running after
// waitEach's win, and gives back any permit they won. Each returns within
// its leave's bound once its context has ended.
func (s *Semaphore) drain(ctx context.Context, waits <-chan permitWait, left int) {
	for range left {
		if w := <-waits; w.err == nil { // bounded: their context has ended
			_ = s.giveBack(ctx, w.lock) // failures in transit were tried again; the lease then ends by the clock
		}
	}
}

// Do takes a permit as Acquire does (waiting until ctx ends), runs fn
// under it and releases it when fn returns or panics, exactly as
// Locker.Do runs work under a lock: renewed while fn runs whatever the
// Locker's options, fn's context cancelled on the permit's loss (its
// cause matching ErrNotHeld), fn's error returned, joined to the loss or
// a failed release. A nil fn is ErrInvalidArgument, and nothing is
// written to Redis.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("%w: Do on semaphore %q: fn is nil", ErrInvalidArgument, s.name)
	}
	lock, err := s.Acquire(ctx)
	if err != nil {
		return err
	}
	return lock.do(ctx, fn)
}
