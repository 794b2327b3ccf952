package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The classic commands, sent as themselves: go-redis's SetNX helper sends
// SET ... NX (Redis 2.6.12+) and its GetSet is deprecated, while this library
// promises to need nothing newer than SETNX, GET, GETSET, DEL and
// WATCH/MULTI/EXEC. GETSET is built in deadlock.go, inside the takeover's
// transaction.

// claim is what the first step of an attempt learned: whether our SETNX
// created the key (and then our fencing token), or else the value found
// there.
type claim struct {
	created      bool
	fencingToken int64
	current      string
	found        bool
}

// claimKey is an attempt's first step: SETNX key <our value>, the safety
// net (H6) and with fencing the token; and when the key exists, GET of the
// holder's value. It is one script where scripts run, else the commands.
func (l *Locker) claimKey(ctx context.Context, key string, ours lease, entry *queueEntry) (claim, error) {
	if l.scripts.usable() {
		c, err := l.scriptedClaim(ctx, key, ours, entry)
		if entry != nil && refused(err) {
			// The queue is refused, not necessarily scripts: stop queueing
			// (the caller then waits as before) and attempt unqueued.
			l.handoff.off.Store(true)
			c, err = l.scriptedClaim(ctx, key, ours, nil)
		}
		if !l.scripts.fallBackIfRefused(err) {
			if err != nil {
				return claim{}, fmt.Errorf("setnxlock: acquire script on %q: %w", key, err)
			}
			return c, nil
		}
	}
	created, token, err := l.setnx(ctx, key, ours)
	if err != nil {
		return claim{}, fmt.Errorf("setnxlock: SETNX %q: %w", key, err)
	}
	if created {
		return claim{created: true, fencingToken: token}, nil
	}
	current, found, err := l.get(ctx, key)
	if err != nil {
		return claim{}, fmt.Errorf("setnxlock: GET %q: %w", key, err)
	}
	return claim{current: current, found: found}, nil
}

// setnx creates key with our value if it does not exist, and gives it the
// safety net (H6). Where the server knows SET's NX and PX options (Redis
// 2.6.12 and later) that is one atomic command; elsewhere it is the classic
// SETNX followed, on a win, by PEXPIRE. With fencing the token is drawn in
// the same MULTI/EXEC, atomically with the win; a losing attempt burns a
// number, which keeps tokens increasing all the same.
func (l *Locker) setnx(ctx context.Context, key string, ours lease) (created bool, token int64, err error) {
	if l.setNXPX.usable() {
		set := redis.NewStatusCmd(ctx, "set", key, ours.value, "nx", "px", l.safetyNet(ours.length()).Milliseconds())
		created, token, err = l.create(ctx, key, set)
		if !l.setNXPX.fallBackIfRefused(err) {
			return created, token, err
		}
	}
	setnx := redis.NewIntCmd(ctx, "setnx", key, ours.value)
	created, token, err = l.create(ctx, key, setnx)
	if created && err == nil && !expired(ours.expiry, l.cfg.clock.Now()) {
		l.setSafetyNet(ctx, key, ours)
	}
	return created, token, err
}

// create sends a command that creates key if it does not exist (SETNX, or
// SET NX), with fencing inside MULTI/EXEC beside the INCR of the counter.
func (l *Locker) create(ctx context.Context, key string, cmd redis.Cmder) (created bool, token int64, err error) {
	if !l.cfg.fencing {
		_ = l.client.Process(ctx, cmd)
		created, err := createdBy(cmd)
		return created, 0, err
	}
	var incr *redis.IntCmd
	cmds, err := l.client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		_ = pipe.Process(ctx, cmd)
		incr = pipe.Incr(ctx, FenceKey(key))
		return nil
	})
	if err = withCause(cmds, err); err != nil && !errors.Is(err, redis.Nil) { // SET NX that did not set answers nil
		return false, 0, err
	}
	created, err = createdBy(cmd)
	if err != nil {
		return false, 0, err
	}
	return created, incr.Val(), incr.Err()
}

// createdBy reads the reply of SETNX (1 or 0) or SET NX (OK or nil).
func createdBy(cmd redis.Cmder) (bool, error) {
	switch cmd := cmd.(type) {
	case *redis.IntCmd:
		n, err := cmd.Result()
		return n == 1, err
	case *redis.StatusCmd:
		err := cmd.Err()
		if errors.Is(err, redis.Nil) {
			return false, nil
		}
		return err == nil, err
	}
	return false, fmt.Errorf("setnxlock: unexpected command %s", cmd.Name())
}

// get sends GET key. found is false when the key does not exist. A key of
// another type is H7.
func (l *Locker) get(ctx context.Context, key string) (value string, found bool, err error) {
	return stringReply(l.client.Get(ctx, key))
}

// stringReply unpacks a bulk-string reply, turning a missing key into
// found=false and a WRONGTYPE reply into ErrNotLockValue (H7).
func stringReply(cmd *redis.StringCmd) (string, bool, error) {
	value, err := cmd.Result()
	switch {
	case err == nil:
		return value, true, nil
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case isWrongType(err):
		return "", false, errors.Join(ErrNotLockValue, err)
	default:
		return "", false, err
	}
}

func isWrongType(err error) bool {
	var redisErr redis.Error
	return errors.As(err, &redisErr) && strings.HasPrefix(redisErr.Error(), "WRONGTYPE")
}

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
	if err := l.checkTransactions(ctx); err != nil {
		return false, err
	}
	for attempt := 0; attempt < maxTransactionAttempts; attempt++ {
		written = false
		err = l.watch(ctx, key, func(tx *redis.Tx, get *redis.StringCmd) error {
			current, found, err := stringReply(get)
			if errors.Is(err, ErrNotLockValue) {
				return unwatch(ctx, tx) // a key of another type is not ours
			}
			if err != nil { // before !found: a lost reply says nothing about the key
				return errors.Join(err, unwatch(ctx, tx))
			}
			if !found {
				return unwatch(ctx, tx)
			}
			if !owned(current) {
				return unwatch(ctx, tx)
			}
			cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				write(pipe)
				return nil
			})
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
// key. On a single server WATCH and GET go in one round trip; go-redis's
// cluster and ring clients need the key to pick the node, so there WATCH
// goes first on its own.
func (l *Locker) watch(ctx context.Context, key string, fn func(tx *redis.Tx, get *redis.StringCmd) error) error {
	client, single := l.client.(*redis.Client)
	if !single {
		return l.client.Watch(ctx, func(tx *redis.Tx) error { return fn(tx, tx.Get(ctx, key)) }, key)
	}
	return client.Watch(ctx, func(tx *redis.Tx) error {
		var get *redis.StringCmd
		_, err := tx.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			_ = pipe.Process(ctx, redis.NewStatusCmd(ctx, "watch", key))
			get = pipe.Get(ctx, key)
			return nil
		})
		if err != nil && get.Err() == nil || errors.Is(err, redis.Nil) && !errors.Is(get.Err(), redis.Nil) {
			return errors.Join(err, unwatch(ctx, tx)) // the WATCH itself failed
		}
		return fn(tx, get)
	})
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
	if l.transactionsChecked.Load() {
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
	l.transactionsChecked.Store(true)
	return nil
}
