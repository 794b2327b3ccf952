package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The transaction core: every write that must not land on someone else's
// value (the takeover's GETSET, release, refresh, the fencing token with a
// SETNX) runs inside WATCH key, GET key, MULTI ... EXEC, so it applies only
// while the key holds what was judged (H1, H2, H3). A plain GET-then-write
// would be the documented race.

// maxTransactionAttempts bounds how often a watched transaction is retried
// when the key changes between WATCH and EXEC. Each retry re-reads the key,
// so the decision is always made on the latest value.
const maxTransactionAttempts = 8

// compareAndWrite atomically applies write to key if, and only if, the key
// currently holds a string for which owned returns true: WATCH, GET, then
// MULTI/write/EXEC, retried when another client changed the key in between.
// This is how an expired lease is taken over (H1, H2) and how release
// deletes (H3); a plain GET-then-DEL would be the documented race.
func (l *Locker) compareAndWrite(ctx context.Context, key string, owned func(current string) bool, write func(redis.Pipeliner)) (written bool, err error) {
	return l.watchedWrite(ctx, key, watched{owned: owned, write: func(pipe redis.Pipeliner) error {
		write(pipe)
		return nil
	}})
}

// watched is one compare-and-write of watchedWrite.
type watched struct {
	also  []string                   // keys watched with the key (a queue), in its slot
	read  func(pipe redis.Pipeliner) // reads of those, in the round trip of WATCH and GET
	owned func(current string) bool  // whether the value found may be written over
	// write queues the writes, once the value found is owned; an error
	// ends the watch without writing.
	write func(pipe redis.Pipeliner) error
}

// watchedWrite is compareAndWrite with more keys watched and read in the
// same round trip: WATCH key and w.also, GET key and w.read, then
// MULTI/w.write/EXEC while owned, retried when any watched key changed.
func (l *Locker) watchedWrite(ctx context.Context, key string, w watched) (written bool, err error) {
	if err := l.checkTransactions(ctx); err != nil {
		return false, err
	}
	for attempt := 0; attempt < maxTransactionAttempts; attempt++ {
		written = false
		err = l.watchWith(ctx, key, w, func(tx *redis.Tx, get *redis.StringCmd) error {
			current, found, err := stringReply(get)
			if errors.Is(err, ErrNotLockValue) {
				return unwatch(ctx, tx) // a key of another type is not ours
			}
			if err != nil { // before !found: a lost reply says nothing about the key
				return errors.Join(err, unwatch(ctx, tx))
			}
			if !found || !w.owned(current) {
				return unwatch(ctx, tx)
			}
			var refused error
			cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				refused = w.write(pipe)
				return refused
			})
			if refused != nil {
				return errors.Join(refused, unwatch(ctx, tx))
			}
			err = withCause(cmds, err)
			written = err == nil
			return err
		})
		if !errors.Is(err, redis.TxFailedErr) {
			return written, err
		}
	}
	return false, err
}

// watch runs fn on a transaction in which key is watched, with the GET of
// key (watchWith).
func (l *Locker) watch(ctx context.Context, key string, fn func(tx *redis.Tx, get *redis.StringCmd) error) error {
	return l.watchWith(ctx, key, watched{}, fn)
}

// watchWith runs fn on a transaction in which key and w.also are watched,
// with the GET of key and w.read's reads. On a single server WATCH and the
// reads go in one round trip; go-redis's cluster and ring clients need the
// key to pick the node, so there WATCH goes first on its own.
func (l *Locker) watchWith(ctx context.Context, key string, w watched, fn func(tx *redis.Tx, get *redis.StringCmd) error) error {
	var get *redis.StringCmd
	reads := func(pipe redis.Pipeliner) {
		get = pipe.Get(ctx, key)
		if w.read != nil {
			w.read(pipe)
		}
	}
	client, single := l.client.(*redis.Client)
	if !single {
		return l.client.Watch(ctx, func(tx *redis.Tx) error {
			_, _ = tx.Pipelined(ctx, func(pipe redis.Pipeliner) error { reads(pipe); return nil })
			return fn(tx, get)
		}, append([]string{key}, w.also...)...)
	}
	return client.Watch(ctx, func(tx *redis.Tx) error {
		args := make([]any, 0, 2+len(w.also))
		args = append(args, "watch", key)
		for _, k := range w.also {
			args = append(args, k)
		}
		watch := redis.NewStatusCmd(ctx, args...)
		cmds, err := tx.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			_ = pipe.Process(ctx, watch)
			reads(pipe)
			return nil
		})
		if watchErr := watch.Err(); watchErr != nil || err != nil && !answered(cmds) {
			return errors.Join(watchErr, err, unwatch(ctx, tx)) // the WATCH itself failed
		}
		return fn(tx, get)
	})
}

// answered reports whether a pipeline that failed has a reply of the
// server's to say why: else it failed before any (the connection).
func answered(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			return true
		}
	}
	return false
}

// unwatch ends a watch that no EXEC will end. go-redis only unwatches the
// WATCHes it sent itself, and a watch left on a pooled connection would
// abort some later, unrelated transaction on it.
func unwatch(ctx context.Context, tx *redis.Tx) error {
	return tx.Unwatch(ctx).Err()
}

// withCause adds to an EXECABORT the reason the server refused a queued
// command (NOPERM, LOADING, a syntax error of an older server), so that
// callers can tell a refusal for good from a server that is not ready yet.
func withCause(cmds []redis.Cmder, err error) error {
	if !redis.IsExecAbortError(err) {
		return err
	}
	for _, cmd := range cmds {
		if cmdErr := cmd.Err(); cmdErr != nil && !redis.IsExecAbortError(cmdErr) {
			return errors.Join(cmdErr, err)
		}
	}
	return err
}

// checkTransactions makes sure, once per Locker, that the server accepts
// MULTI before any write relies on it. MULTI, the writes and EXEC go out in
// one round trip: were MULTI refused (an ACL user without it, a proxy that
// does not pass it on), the writes would run at once, unguarded by the
// WATCH, and a release could delete the next holder's key (H3). A transport
// error leaves the question open for the next write.
func (l *Locker) checkTransactions(ctx context.Context) error {
	if l.caps.transactions.Load() {
		return nil
	}
	multi := redis.NewStatusCmd(ctx, "multi")
	_, _ = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		_ = pipe.Process(ctx, multi)
		_ = pipe.Process(ctx, redis.NewSliceCmd(ctx, "exec")) // an empty transaction
		return nil
	})
	if err := multi.Err(); err != nil {
		var redisErr redis.Error
		if errors.As(err, &redisErr) {
			return fmt.Errorf("%w: %w", ErrNoTransactions, err)
		}
		return err
	}
	l.caps.transactions.Store(true)
	return nil
}

// undoTimeout bounds the undo of a write that won but may not stand (not
// acknowledged by the replicas, or its fencing token not drawn); it runs
// even when the caller's context has ended.
const undoTimeout = time.Second

// undoWrite deletes key while it holds exactly value, a write of ours that
// won but is given back before anyone was granted it, and wakes the key's
// waiters, as a release would.
func (l *Locker) undoWrite(ctx context.Context, key, value string) (deleted bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	return l.deleteOwned(ctx, key, func(current string) bool { return current == value })
}

// deleteOwned deletes key if it holds a value owned reports ours, and
// publishes the release on the key's wake channel, in one watched
// transaction. A refused PUBLISH aborts the transaction: wake-ups are then
// switched off and the transaction runs again without it.
func (l *Locker) deleteOwned(ctx context.Context, key string, owned func(current string) bool) (bool, error) {
	for {
		publish := l.caps.allows(capPubSub)
		deleted, err := l.compareAndWrite(ctx, key, owned, func(pipe redis.Pipeliner) {
			pipe.Del(ctx, key)
			if publish {
				pipe.Publish(ctx, WakeChannel(key), key)
			}
		})
		if !publish || !l.caps.narrow(capPubSub, err) {
			return deleted, err
		}
	}
}
