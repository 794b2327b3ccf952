package setnxlock

import (
	"errors"
	"fmt"
)

// ErrNotAcquired reports that the lock could not be taken: another client
// holds a live lease, or (from Acquire) the context ended first, in which
// case the error also matches the context's error.
var ErrNotAcquired = errors.New("setnxlock: not acquired")

// ErrNotHeld reports that a Release (or later a Refresh) found the lock no
// longer ours: our lease had expired, or the key holds another owner's
// value. While our lease is live by our clock, Release takes a key no
// longer ours for its own earlier release whose reply was lost (H5) and
// reports ErrNotHeld only after an operator's ForceRelease (which leaves a
// trace), or for a lease already lost; a failover that lost the key (H9)
// goes unseen by Release: Done/Err and WithReplicas are the tools there.
var ErrNotHeld = errors.New("setnxlock: lock not held")

// ErrNotLockValue reports that the key holds something that is not a lock
// value this library can read: garbage text, or a key of another type (H7).
// The key is left as it was.
var ErrNotLockValue = errors.New("setnxlock: key holds a value that is not a lock")

// ErrWatchIgnored reports that a GETSET run inside WATCH/MULTI/EXEC replaced
// a value other than the one watched: the server, or a proxy in front of it,
// accepts WATCH but does not honour it. Taking over and releasing locks
// safely needs WATCH, so the Locker stops rather than retry.
var ErrWatchIgnored = errors.New("setnxlock: the server does not honour WATCH")

// errNilObserver is WithObserver's complaint about a nil Observer.
var errNilObserver = fmt.Errorf("%w: nil Observer", ErrInvalidArgument)

// ErrInvalidArgument reports bad input to New, an Option or a method: a nil
// client, an empty key, a TTL or backoff out of range. Nothing is written to
// Redis when it is returned.
var ErrInvalidArgument = errors.New("setnxlock: invalid argument")

// ErrNotReplicated reports that a lease write (an acquisition, a renewal)
// was not acknowledged by as many replicas as WithReplicas asks within its
// timeout. An acquisition is then undone; a renewal counts as failed, and
// the lease keeps its earlier end. The message says how many acknowledged.
var ErrNotReplicated = errors.New("setnxlock: not acknowledged by enough replicas")

// ErrNoTransactions reports that the server, a proxy or the ACL user
// refuses MULTI. Taking over expired leases, refreshing and releasing
// without scripts need WATCH/MULTI/EXEC to be safe (H2, H3), so the Locker
// refuses to write rather than run those writes unguarded.
var ErrNoTransactions = errors.New("setnxlock: the server refuses MULTI/EXEC transactions")

// ErrPermitsMismatch reports that a semaphore's acquisition found another
// number of permits recorded in Redis (PermitsKey) than its client asks
// for: nothing was written. Every client of a semaphore must agree on its
// count; Semaphore.Resize changes it.
var ErrPermitsMismatch = errors.New("setnxlock: the semaphore's recorded number of permits differs")

// ErrCrossSlot reports a group of keys (TryAcquireMany, AcquireMany) that
// a Redis Cluster could not lock in one transaction: its keys hash to
// different slots. Nothing was written. Give the keys one hash tag
// ("{order42}.stock", "{order42}.payment") to put them in one slot. It
// matches ErrInvalidArgument.
var ErrCrossSlot = fmt.Errorf("%w: keys in different Redis Cluster slots", ErrInvalidArgument)
