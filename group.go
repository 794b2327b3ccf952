package setnxlock

import (
	"context"
	"errors"
	"slices"

	"github.com/redis/go-redis/v9"
)

// A group lock (TryAcquireMany, AcquireMany) is one Lock on several keys:
// the same value, one lease and one fencing token on every key, written
// and renewed all at once. Everything Lock-level (the lease, the keeper,
// Done, Err, Context, Orphan, the observer's events, WithReplicas) is the
// single-key Lock's; only its round trips to Redis branch here, each one
// watched transaction over every key: the release deletes the keys that
// still hold our value (H3), the renewal rewrites them only while all of
// them do (all or nothing), and the undo of a write that may not stand
// deletes the keys still holding it. A group is never queued for and
// never handed over: its release frees each key and wakes its waiters.

// Keys returns every key the lock holds, in the order given: for a lock
// of TryAcquireMany or AcquireMany its keys, for any other lock Key()
// alone. The slice is the caller's own copy; a nil Lock returns nil.
func (k *Lock) Keys() []string {
	if k == nil {
		return nil
	}
	if k.keys == nil {
		return []string{k.key}
	}
	return slices.Clone(k.keys)
}

// read is what a watched transaction read at one key: its string value
// (found), or the error of its GET (a key of another type: ErrNotLockValue).
type read struct {
	value string
	found bool
	err   error
}

// watchAll runs fn on a transaction in which every key of keys is watched
// and read (GET each, in the round trip of the WATCH, watchWith), retried
// while a watched key changed before EXEC (redis.TxFailedErr), at most
// maxTransactionAttempts times. GET rather than MGET: MGET reads a key of
// another type as missing, and a transaction that took it for a free key
// would overwrite it (H7). fn must end the watch itself when it writes
// nothing (unwatch).
func (l *Locker) watchAll(ctx context.Context, keys []string, fn func(tx *redis.Tx, reads []read) error) error {
	if err := l.checkTransactions(ctx); err != nil {
		return err
	}
	var err error
	for range maxTransactionAttempts {
		gets := make([]*redis.StringCmd, len(keys))
		err = l.watchWith(ctx, keys[0], watched{
			also: keys[1:],
			read: func(pipe redis.Pipeliner) {
				for i, key := range keys[1:] {
					gets[i+1] = pipe.Get(ctx, key)
				}
			},
		}, func(tx *redis.Tx, get *redis.StringCmd) error {
			gets[0] = get
			reads := make([]read, len(keys))
			for i, cmd := range gets {
				reads[i].value, reads[i].found, reads[i].err = stringReply(cmd)
				if reads[i].err != nil && !errors.Is(reads[i].err, ErrNotLockValue) {
					// A lost reply says nothing about the key.
					return errors.Join(reads[i].err, unwatch(ctx, tx))
				}
			}
			return fn(tx, reads)
		})
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return err
}

// compareAndSetAll applies write to every key of keys, in one watched
// transaction, if and only if every key holds a value owned reports ours:
// the group's renewal, all or nothing (H3). written is false, and nothing
// is written, when any key is missing or not ours.
func (l *Locker) compareAndSetAll(ctx context.Context, keys []string, owned func(string) bool, write func(pipe redis.Pipeliner, key string)) (written bool, err error) {
	err = l.watchAll(ctx, keys, func(tx *redis.Tx, reads []read) error {
		written = false
		for _, r := range reads {
			if !r.found || r.err != nil || !owned(r.value) {
				return unwatch(ctx, tx)
			}
		}
		cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, key := range keys {
				write(pipe, key)
			}
			return nil
		})
		err = withCause(cmds, err)
		written = err == nil
		return err
	})
	return written, err
}

// deletedGroup is what deleteAllOwned did: how many keys it deleted, and
// the first key found holding something that is not ours ("" if none).
type deletedGroup struct {
	deleted int
	foreign string
}

// deleteAllOwned deletes, in one watched transaction, every key of keys
// that holds a value owned reports ours, and leaves the others alone (H3);
// each key deleted is announced on its wake channel, in the transaction,
// and, where Lockers hand over, its first queued waiter is woken to race
// for it (as a release that frees its key does, commandhandon.go's
// freeOwned): nobody is handed a group's key, and a queued waiter that
// missed the wake-up finds the key free on its next poll (announcedPoll).
// A refused PUBLISH turns wake-ups off and the transaction runs again
// without it (deleteOwned).
func (l *Locker) deleteAllOwned(ctx context.Context, keys []string, owned func(string) bool) (deletedGroup, error) {
	for {
		publish := l.caps.allows(capPubSub)
		var done deletedGroup
		var ours []string
		err := l.watchAll(ctx, keys, func(tx *redis.Tx, reads []read) error {
			done, ours = deletedGroup{}, ours[:0]
			for i, r := range reads {
				switch {
				case r.found && r.err == nil && owned(r.value):
					ours = append(ours, keys[i])
				case (r.found || r.err != nil) && done.foreign == "":
					done.foreign = keys[i]
				}
			}
			if len(ours) == 0 {
				return unwatch(ctx, tx)
			}
			cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				pipe.Del(ctx, ours...)
				if publish {
					for _, key := range ours {
						pipe.Publish(ctx, WakeChannel(key), key)
					}
				}
				return nil
			})
			if err = withCause(cmds, err); err == nil {
				done.deleted = len(ours)
			}
			return err
		})
		if publish && l.caps.narrow(capPubSub, err) {
			continue
		}
		if err == nil && done.deleted > 0 && l.handsOver() {
			for _, key := range ours {
				commandQueue{l}.wakeHead(ctx, key)
			}
		}
		return done, err
	}
}

// undoGroup deletes every key of keys still holding exactly value, a
// group write of ours that may not stand (its reply lost, H5, or not
// acknowledged by the replicas, H9), before anyone was granted it; bounded
// whatever ctx says.
func (l *Locker) undoGroup(ctx context.Context, keys []string, value string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	_, err := l.deleteAllOwned(ctx, keys, func(current string) bool { return current == value })
	return err
}

// setOwned is the Lock's compare-and-set of its renewal: on its key, or on
// every key of a group, all or nothing (compareAndSetAll).
func (k *Lock) setOwned(ctx context.Context, write func(pipe redis.Pipeliner, key string)) (bool, error) {
	if k.keys != nil {
		return k.locker.compareAndSetAll(ctx, k.keys, k.owns, write)
	}
	return k.locker.compareAndWrite(ctx, k.key, k.owns, func(pipe redis.Pipeliner) { write(pipe, k.key) })
}

// alsoWritten is what a renewal to value wrote besides the lock's key, for
// the replicas to acknowledge with it (replicate): a group's other keys.
func (k *Lock) alsoWritten(value string) []ourWrite {
	if k.keys == nil {
		return nil
	}
	return groupWrites(k.keys[1:], value)
}

// releaseGroup is a group's release: every key still ours deleted, in one
// watched transaction (deleteAllOwned). deleted reports whether every key
// was; foreign names a key that holds someone else's value.
func (l *Locker) releaseGroup(ctx context.Context, k *Lock) (deleted bool, foreign string, err error) {
	done, err := l.deleteAllOwned(ctx, k.keys, k.owns)
	return err == nil && done.deleted == len(k.keys), done.foreign, err
}

// forcedAwayAny is forcedAway for every key of the lock: whether an
// operator's ForceRelease broke the lease on any of them.
func (l *Locker) forcedAwayAny(ctx context.Context, k *Lock) bool {
	for _, key := range k.Keys() {
		if l.forcedAwayFrom(ctx, k, key) {
			return true
		}
	}
	return false
}
