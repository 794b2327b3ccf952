package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// A semaphore of N permits is N lock keys, PermitKey(name, 0) to
// PermitKey(name, N-1), each an ordinary lock: a permit is held exactly as
// a lock is (the page's SETNX, the GETSET takeover of a crashed holder's
// expired lease, H1–H11 alike), and it is a *Lock, with everything a Lock
// does. At most one lease lives on each permit key, so at most N holders
// hold permits while every client agrees on N; the count is recorded at
// PermitsKey(name) and checked before every acquisition (semaphorecount.go).
//
// Waiting is the lock's waiting, on every permit at once: an Acquire that
// finds every permit held waits on each permit key as Locker.Acquire does
// (queued, woken or polling), keeps the first permit it gets and gives up
// the others, which hands each on to the next in its line. Each permit's
// queue is arrival-ordered and every waiter stands in each of them, so a
// permit goes to the longest waiter that has none yet: waiters are served
// in arrival order, up to the jitter of their entries' scores.

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
func PermitKey(name string, i int) string { return sameSlotKey(name, fmt.Sprintf(".permit.%d", i)) }

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
	return key
}

// TryAcquire makes one attempt at each permit, from a different one each
// call, and returns the first it wins. It returns an error matching
// ErrNotAcquired when every permit is held by a live lease, and
// ErrPermitsMismatch (nothing written) when the recorded count differs
// from this client's. A permit key holding something that is not a lock
// value (H7) is left untouched and the others still serve: the error then
// also matches ErrNotLockValue when no permit was won.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	n, err := s.agree(ctx)
	if err != nil {
		return nil, err
	}
	lock, _, err := s.tryEach(ctx, n)
	return lock, err
}

// tryEach tries each of n permits once, from a rotating start, and says
// how many hold no lock value (H7).
func (s *Semaphore) tryEach(ctx context.Context, n int) (lock *Lock, foreign int, err error) {
	start := int((s.next.Add(1) - 1) % uint64(n))
	var foreignErrs []error
	for j := range n {
		lock, err := s.locker.TryAcquire(ctx, s.permitKey((start+j)%n))
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

// Acquire takes a permit, waiting while all are held: on every permit at
// once, as Locker.Acquire waits on a key (queued in arrival order, woken,
// polling; a crashed holder's permit is taken over when its lease ends).
// It keeps the first permit it gets and gives up the others it is handed
// meanwhile. When ctx ends first it returns an error matching both
// ErrNotAcquired and ctx.Err(). ErrPermitsMismatch: the recorded count
// differs from this client's, and nothing was written. Permit keys that
// hold something else (H7) are left untouched and not waited on; when
// every permit does, the error matches ErrNotLockValue.
func (s *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	n, err := s.agree(ctx)
	if err != nil {
		return nil, err
	}
	lock, foreign, err := s.tryEach(ctx, n)
	if !errors.Is(err, ErrNotAcquired) || foreign == n {
		return lock, err // won, failed, or nothing to wait for
	}
	return s.waitEach(ctx, n)
}

// permitWait is the outcome of one permit's Acquire within a semaphore's.
type permitWait struct {
	lock *Lock
	err  error
}

// waitEach waits on each of n permits at once (Locker.Acquire) and keeps
// the first it wins. Every wait it starts has returned when it returns:
// the others end with their context, leaving their queues (which hands on
// what was handed to them), and a permit won after the first is released,
// which hands it to the next in line.
func (s *Semaphore) waitEach(ctx context.Context, n int) (*Lock, error) {
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	waits := make(chan permitWait, n)
	for i := range n {
		key := s.permitKey(i)
		go func() {
			lock, err := s.locker.Acquire(waitCtx, key)
			waits <- permitWait{lock, err}
		}()
	}
	var (
		won     *Lock
		failed  error   // the first failure that ends the whole wait
		foreign []error // permits that hold no lock value (H7): not waited on
	)
	for range n {
		w := <-waits // bounded: every wait returns once waitCtx ends, cancelled below on the first win or failure
		switch {
		case w.err == nil && won == nil:
			won = w.lock
			cancel()
		case w.err == nil:
			_ = w.lock.Release(context.WithoutCancel(ctx)) // a second permit: handed on to the next in line, or freed
		case errors.Is(w.err, ErrNotLockValue):
			foreign = append(foreign, w.err)
		case errors.Is(w.err, ErrNotAcquired) && waitCtx.Err() != nil:
			// ended with ctx, or with the wait's first win or failure
		case failed == nil:
			failed = w.err
			cancel()
		}
	}
	switch {
	case won != nil:
		return won, nil
	case failed != nil:
		return nil, failed
	}
	return nil, s.notAcquired(n, foreign, ctx.Err())
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
