package setnxlock

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The classic commands, sent as themselves: go-redis's SetNX helper sends
// SET ... NX (Redis 2.6.12+) and its GetSet is deprecated, while this library
// promises to need nothing newer than SETNX, GET, GETSET, DEL and
// WATCH/MULTI/EXEC. GETSET is built in deadlock.go, inside the takeover's
// transaction.

// setnx sends SETNX key value and reports whether the key was created.
func (l *Locker) setnx(ctx context.Context, key, value string) (bool, error) {
	cmd := redis.NewIntCmd(ctx, "setnx", key, value)
	_ = l.client.Process(ctx, cmd)
	n, err := cmd.Result()
	return n == 1, err
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
	for attempt := 0; attempt < maxTransactionAttempts; attempt++ {
		written = false
		err = l.client.Watch(ctx, func(tx *redis.Tx) error {
			current, found, err := stringReply(tx.Get(ctx, key))
			if errors.Is(err, ErrNotLockValue) || !found {
				return nil // a missing key or a key of another type is not ours
			}
			if err != nil || !owned(current) {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				write(pipe)
				return nil
			})
			written = err == nil
			return err
		}, key)
		if !errors.Is(err, redis.TxFailedErr) {
			return written, err
		}
	}
	return false, err
}
