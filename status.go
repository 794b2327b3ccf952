package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reading a lock key from the outside, for tools and operators: what it
// holds, in which format, until when, and how many wait in its queue; and
// deleting it whoever holds it. Neither takes part in the algorithm: Status
// writes nothing, and ForceRelease is the operator's override, which breaks
// the lock of a holder that may still be working.

// KeyStatus is what a lock key holds, as Locker.Status read it.
type KeyStatus struct {
	Key string
	// Exists is whether the key exists at all, lock value or not.
	Exists bool
	// Foreign is set when the key holds something that is not a lock value
	// this library reads: garbage text, or a key of another type (H7).
	Foreign bool
	// Value is the stored string; "" when the key is missing or not a string.
	Value string
	// Format is the format Value is written in; meaningful only when Exists
	// and not Foreign. A timestamp with a suffix other than an owner token
	// is reported in the format of its number.
	Format Format
	// ExpiresAt is the end of the lease the value states; the zero time
	// when the key is missing or foreign.
	ExpiresAt time.Time
	// Held is whether the lease is live by the Locker's clock and skew
	// margin: a TryAcquire now would be refused.
	Held bool
	// Waiters is the length of the key's queue of waiting Acquire calls
	// (handoff); 0 where nothing queues.
	Waiters int64
	// Identity is who the value says holds it (WithIdentity): the part
	// after its owner token. "" when the value states none (a bare
	// timestamp, an older version's or a foreign client's value, a value
	// a release wrote for a queued waiter before its claim) or an identity
	// part that is not one, which is ignored.
	Identity string
}

// Status reads what key holds, without writing anything: one round trip
// with GET key and ZCARD of the key's queue. A key of another type, or a
// string that is no lock value, is reported with Foreign set and a nil
// error. Errors are network errors and replies such as NOPERM.
func (l *Locker) Status(ctx context.Context, key string) (KeyStatus, error) {
	if key == "" {
		return KeyStatus{}, fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	var read statusRead
	// Each command's own reply is read below; Pipelined's error is the first of them.
	_, _ = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		read = readStatus(ctx, pipe, key)
		return nil
	})
	return read.status(l.cfg.clock.Now(), l.takeableAt)
}

// statusRead is the round trip of a key's status, queued in a pipeline:
// GET of the key and ZCARD of its queue.
type statusRead struct {
	key     string
	get     *redis.StringCmd
	waiters *redis.IntCmd
}

// readStatus queues the commands of key's status in pipe.
func readStatus(ctx context.Context, pipe redis.Pipeliner, key string) statusRead {
	return statusRead{key: key, get: pipe.Get(ctx, key), waiters: pipe.ZCard(ctx, waitersKey(key))}
}

// status is what the replies say of the key, judged at now as an
// acquisition would judge it (describe).
func (r statusRead) status(now time.Time, takeableAt func(heldUntil time.Time) time.Time) (KeyStatus, error) {
	status := KeyStatus{Key: r.key}
	value, found, err := stringReply(r.get)
	switch {
	case errors.Is(err, ErrNotLockValue):
		status.Exists, status.Foreign = true, true
	case err != nil:
		return KeyStatus{}, fmt.Errorf("setnxlock: status of %q: %w", r.key, err)
	case found:
		status.Exists, status.Value = true, value
		status.describe(now, takeableAt)
	}
	n, err := r.waiters.Result()
	if err != nil && !isWrongType(err) { // a foreign key where the queue would be: nobody queues there
		return KeyStatus{}, fmt.Errorf("setnxlock: queue length of %q: %w", r.key, err)
	}
	status.Waiters = n
	return status, nil
}

// describe fills in what s.Value states, judged at now with the reader's
// skew margin and clock, as an acquisition would judge it (acquire.go).
func (s *KeyStatus) describe(now time.Time, takeableAt func(heldUntil time.Time) time.Time) {
	expiry, err := parseExpiry(s.Value)
	if err != nil {
		s.Foreign = true
		return
	}
	until, _ := heldUntil(s.Value) // parses whenever parseExpiry does
	s.ExpiresAt = expiry
	s.Held = !expired(takeableAt(until), now)
	s.Format = formatOf(s.Value)
	s.Identity = identityOf(s.Value)
}

// formatOf names the format a readable lock value is written in: a decimal
// number is FloatSeconds; an integer below the milliseconds boundary is
// UnixSeconds; milliseconds followed by ":" and a token are TokenFormat,
// bare milliseconds UnixMillis.
func formatOf(value string) Format {
	number, _ := leadingNumber(value)
	switch {
	case strings.Contains(number, "."):
		return FloatSeconds
	case isWholeSeconds(number):
		return UnixSeconds
	case tokenOf(value) != "":
		return TokenFormat
	}
	return UnixMillis
}

// ForceRelease deletes key whoever holds it, and returns what it deleted.
// It is the operator's override: the holder, if still working, is not told
// and its Release will report ErrNotHeld (by the trace of the broken
// lease's token, forcetrace.go); fencing tokens (FenceKey) are
// kept, so they still increase. The delete is watched on the value read, so
// what is reported is exactly what was deleted. A missing key returns a
// status with Exists false and a nil error; a key that holds no lock value
// is left untouched and returned with an error matching ErrNotLockValue.
// Waiters are told on WakeChannel, as by a Release.
func (l *Locker) ForceRelease(ctx context.Context, key string) (KeyStatus, error) {
	if key == "" {
		return KeyStatus{}, fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	for attempt := 0; attempt < maxTransactionAttempts; attempt++ {
		status, err := l.Status(ctx, key)
		switch {
		case err != nil:
			return KeyStatus{}, err
		case !status.Exists:
			return status, nil
		case status.Foreign:
			return status, fmt.Errorf("%w: %q left untouched", ErrNotLockValue, key)
		}
		deleted, err := l.forceDelete(ctx, key, status.Value)
		if err != nil {
			return KeyStatus{}, fmt.Errorf("setnxlock: force release of %q: %w", key, err)
		}
		if deleted {
			// Best effort, like a release's announcement: waiters also poll.
			_ = l.client.Publish(ctx, WakeChannel(key), key).Err()
			return status, nil
		}
		// The key changed between the read and the watched delete: read again.
	}
	return KeyStatus{}, fmt.Errorf("setnxlock: force release of %q: the key kept changing", key)
}
