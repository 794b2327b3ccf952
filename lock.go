package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// Lock is a lease on one key, returned by TryAcquire or Acquire. Its methods
// are safe for concurrent use.
type Lock struct {
	locker *Locker
	key    string
	keys   []string // a group's keys (TryAcquireMany), key first; nil for a lock on one key (group.go)

	fencingToken int64  // 0 without WithFencing
	token        string // TokenFormat: in every value we write for this lease; ownership is carrying it

	op    chan struct{} // a one-slot semaphore serialising the calls that talk to Redis; waiting on it honours ctx
	state atomicState   // where the Lock is in its life; see lockState
	value string        // guarded by op: without a token, ownership is holding exactly this value
	maybe []string      // guarded by op: values refreshes in doubt may have written instead
	// releaseInDoubt, guarded by op: a Release failed in transit and may
	// have deleted the key. Unlike the inDoubt state, a later Refresh that
	// finds the key gone (lost) does not erase it (H5).
	releaseInDoubt bool

	lease *lease // its end, its renewals' start, and how its life ended (lease.go)

	renewAlways atomic.Bool // the keeper renews the lease whatever the Locker's options (Do)
	acquiredAt  time.Time   // when it was won, by the Locker's clock (Event.Held)
	ending      *Event      // with a CallObserver, the event that announced its end: written before lease.done closes, read after

	// afterRelease, set only for a read/write lock's reader before it is
	// handed out, runs after a Release that left the key not ours (nil or
	// ErrNotHeld): it takes the reader off its lock's list (rwadmit.go).
	// A Release in doubt leaves it listed: the key may still hold our
	// value, and writers must keep finding it until they judge it over.
	afterRelease func(ctx context.Context)
}

// lockAndLease is a Lock and its lease in one allocation: the lease lives
// exactly as long as the Lock that points to it.
type lockAndLease struct {
	lock  Lock
	lease lease
}

// newLock is a Lock of this Locker on key, won at now by the Locker's
// clock, with a lease that began at start and ends at end, and its turn
// free; the caller sets what it holds the key with.
func (l *Locker) newLock(key string, start, end, now time.Time) *Lock {
	both := &lockAndLease{lock: Lock{locker: l, key: key, op: make(chan struct{}, 1), acquiredAt: now}}
	both.lease.init(start, end)
	both.lock.lease = &both.lease
	return &both.lock
}

// lockState is where a Lock is in its life: held (or orphaned, once
// Orphan has stopped its renewals), then releasing once Release is called,
// inDoubt while a Release that failed in transit may have deleted the key,
// and released once a Release has done its round trip, whatever it found;
// or lost when a renewal, a Refresh or the lease's end says the key is no
// longer ours. released and lost are its ends: Done is closed, and Err
// says whether the lease was lost. A lost Lock may still be released (its
// value, if still there, is deleted as a courtesy); a released one is
// never touched again.
type lockState int32

const (
	held      lockState = iota // ours while the lease lasts; renewed with auto-refresh
	orphaned                   // Orphan was called: ours while the lease lasts, never renewed by the keeper
	releasing                  // Release was called: no more renewals, whatever its outcome
	inDoubt                    // a Release failed in transit and may have deleted the key
	released                   // Release did its round trip
	lost                       // refused, overwritten or run out
)

// atomicState is a lockState read by the keeper goroutine without the op
// slot, and written under it.
type atomicState struct{ v atomic.Int32 }

func (s *atomicState) load() lockState   { return lockState(s.v.Load()) }
func (s *atomicState) store(x lockState) { s.v.Store(int32(x)) }

// settle moves the Lock to an end of its life, released or lost; released is
// final, so that nothing is sent for a released lock again (H3).
func (s *atomicState) settle(x lockState) {
	for {
		current := s.v.Load()
		if lockState(current) == released || s.v.CompareAndSwap(current, int32(x)) {
			return
		}
	}
}

// Key returns the Redis key the lock is held on, or "" for a nil Lock.
func (k *Lock) Key() string {
	if k == nil {
		return ""
	}
	return k.key
}

// ExpiresAt returns the end of the lease: after this instant, by the
// Locker's clock, other clients may take the lock over. With a clock that
// reports its Uncertainty (ServerClock) it is the end the key states less
// that uncertainty. A lock lost before its lease ran out (Done is closed,
// Err matches ErrNotHeld) reports the instant it was lost, so a holder
// that checks now.Before(ExpiresAt()) before each write stops there. A nil
// Lock returns the zero time.
func (k *Lock) ExpiresAt() time.Time {
	if k == nil {
		return time.Time{}
	}
	return k.lease.heldUntil()
}

// Release gives the lock up. It deletes the key only if it still holds our
// value, atomically (H3). It returns an error matching ErrNotHeld, and leaves
// any other owner's key alone, when our lease has already expired or an
// operator's ForceRelease broke it; an expired value that is still ours is
// deleted as a courtesy, but the caller is still told the lease was lost.
// A key that is no longer ours while our lease is live is taken for our own
// earlier release whose reply was lost (H5), so Release reports nil even
// when a failover lost the key (H9): Done and Err, and WithReplicas, are
// the tools for that. A Release that
// failed with a network error may be called again; calling it again after
// it succeeded returns ErrNotHeld, and so does Release on a nil Lock. Like
// Refresh, Release of a held lock returns at the lease's end at the latest
// (H11): if Redis has not answered by then, with the loss (ErrNotHeld),
// as Err reports it; the round trip goes on in the background.
func (k *Lock) Release(ctx context.Context) error {
	if k == nil {
		return errNilLock
	}
	ctx, end := k.locker.beginCall(ctx, CallRelease, k.key)
	k.state.v.CompareAndSwap(int32(held), int32(releasing)) // no more renewals, even if this call fails
	err := k.release(ctx)
	if k.afterRelease != nil && (err == nil || errors.Is(err, ErrNotHeld)) {
		k.afterRelease(ctx)
	}
	k.awaitKeeper(ctx)
	if end != nil {
		end(CallResult{Event: k.endEvent(), Err: err})
	}
	return err
}

// release is Release's round trip, in the Lock's turn and bounded by its
// lease (inTurn): Redis's answer if it comes by the lease's end, else the
// loss then, as Done and Err report it.
func (k *Lock) release(ctx context.Context) error {
	return k.inTurn(ctx, "release", func() error {
		if err := k.callable(ctx, "release"); err != nil {
			return err
		}
		expiresAt := k.lease.ends() // a Release in doubt answers by the lease, whatever a Refresh since found (H5)
		live := !expired(expiresAt, k.locker.cfg.clock.Now())
		var deleted bool
		var foreign string // a group's key that holds someone else's value (H3)
		var err error
		if k.keys != nil {
			deleted, foreign, err = k.locker.releaseGroup(ctx, k)
		} else {
			deleted, err = k.locker.deleteIfOwned(ctx, k)
		}
		if err != nil {
			k.state.store(inDoubt)
			k.releaseInDoubt = true
			return fmt.Errorf("setnxlock: release %q: %w", k.key, err)
		}
		switch {
		case !live:
			return k.finish(released, fmt.Errorf("%w: the lease on %q expired at %s", ErrNotHeld, k.key, expiresAt.UTC().Format(time.RFC3339Nano)))
		case foreign != "":
			return k.finish(released, fmt.Errorf("%w: %q no longer holds our value", ErrNotHeld, foreign))
		case !deleted && !k.releaseInDoubt && (k.token == "" || k.Err() != nil),
			!deleted && k.token != "" && k.locker.forcedAwayAny(ctx, k): // a trace proves no run of ours deleted it, even one in doubt (review 24)
			return k.finish(released, fmt.Errorf("%w: %q no longer holds our value", ErrNotHeld, k.key))
		}
		// Deleted now, or by an earlier run whose reply was lost (H5): while
		// our lease is live nobody else removes our value but an operator's
		// ForceRelease, which leaves a trace (forcetrace.go). A bare value's
		// scripted release recognises its earlier run by its own id instead;
		// a lease already lost (a renewal or Refresh found the key not ours)
		// stays lost.
		return k.finish(released, nil)
	}, k.lostWith("release"))
}

// deleteIfOwned deletes the lock's key if it still holds our value (H3),
// atomically, and announces the release to waiters, on the Locker's path.
func (l *Locker) deleteIfOwned(ctx context.Context, k *Lock) (deleted bool, err error) {
	err = l.onPath(func(p path) error {
		deleted, err = l.releaseOn(ctx, p, k)
		return err
	})
	return deleted, err
}

// callable refuses, before any round trip, a call on a released lock or with
// a context that has already ended. The caller holds the op slot.
func (k *Lock) callable(ctx context.Context, verb string) error {
	state := k.state.load()
	if state == released {
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, k.key)
	}
	if (state == inDoubt || k.releaseInDoubt) && k.token == "" {
		// A bare value cannot tell our lease from a successor's written
		// in the same millisecond (or second): if the Release whose
		// reply was lost deleted the key, another Release or a Refresh
		// might hit the successor's identical value (H3). Leave the key
		// to its expiry. releaseInDoubt, not only the state: the lease's
		// end, declared meanwhile, moves the state to lost, and the
		// courtesy delete of a lost lock's value must not follow (the
		// fuzz input testdata/fuzz/FuzzOperationSequences/a425f4ecdb399ec3).
		return k.finish(released, fmt.Errorf("%w: %q: an earlier Release may have deleted it; without an owner token the key is left to expire", ErrNotHeld, k.key))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("setnxlock: %s %q: %w", verb, k.key, err)
	}
	return nil
}

// owns reports whether a value at our key is ours (H3): it carries our
// lease's token, or, in a format without tokens, it is exactly the value we
// last wrote. A refresh whose reply was lost may have replaced our value
// with a newer one of ours, and both are recognised. The caller holds the
// op slot.
func (k *Lock) owns(current string) bool {
	switch {
	case !ownerCheck:
		return true
	case k.token != "":
		return tokenOf(current) == k.token
	}
	return current == k.value || slices.Contains(k.maybe, current)
}
