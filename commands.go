package setnxlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The classic commands, sent as themselves: go-redis's SetNX helper sends
// SET ... NX (Redis 2.6.12+) and its GetSet is deprecated, while this library
// promises to need nothing newer than SETNX, GET, GETSET, DEL and
// WATCH/MULTI/EXEC. GETSET is built in deadlock.go, inside the takeover's
// transaction.

// commandPath is the path of the commands: SET NX PX where the server
// knows it, else the classic SETNX and PEXPIRE; GET; the watched
// compare-and-delete; with its own transport of the queue protocol
// (commandqueue.go).
type commandPath struct{ l *Locker }

// queue is the command transport of the queue protocol.
func (p commandPath) queue() queueTransport { return commandQueue(p) }

// claim is SETNX (or SET NX PX) and, when the key exists, GET.
func (p commandPath) claim(ctx context.Context, key string, ours stamp) (claimOutcome, error) {
	created, token, err := p.l.setnx(ctx, key, ours)
	if err != nil {
		return claimOutcome{}, fmt.Errorf("setnxlock: SETNX %q: %w", key, err)
	}
	if created {
		return claimOutcome{created: true, fencingToken: token}, nil
	}
	current, found, err := p.l.get(ctx, key)
	if err != nil {
		return claimOutcome{}, fmt.Errorf("setnxlock: GET %q: %w", key, err)
	}
	return claimOutcome{current: current, found: found}, nil
}

// release is WATCH/GET/MULTI/DEL/PUBLISH/EXEC on the lock's values.
func (p commandPath) release(ctx context.Context, k *Lock) (bool, error) {
	return p.l.deleteOwned(ctx, k.key, k.owns)
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

// setnx creates key with our value if it does not exist, and gives it the
// safety net (H6). Where the server knows SET's NX and PX options (Redis
// 2.6.12 and later) that is one atomic command; elsewhere it is the classic
// SETNX followed, on a win, by PEXPIRE. With fencing the token is drawn in
// the same MULTI/EXEC, atomically with the win; a losing attempt burns a
// number, which keeps tokens increasing all the same.
func (l *Locker) setnx(ctx context.Context, key string, ours stamp) (created bool, token int64, err error) {
	if l.caps.allows(capSetNXPX) {
		set := redis.NewStatusCmd(ctx, "set", key, ours.value, "nx", "px", l.safetyNet(ours.length()).Milliseconds())
		created, token, err = l.create(ctx, key, ours, set)
		if !l.caps.narrow(capSetNXPX, err) {
			return created, token, err
		}
	}
	setnx := redis.NewIntCmd(ctx, "setnx", key, ours.value)
	created, token, err = l.create(ctx, key, ours, setnx)
	if created && err == nil && !expired(ours.expiry, l.cfg.clock.Now()) {
		l.setSafetyNet(ctx, key, ours)
	}
	return created, token, err
}

// create sends a command that creates key with ours if it does not exist
// (SETNX, or SET NX), with fencing inside MULTI/EXEC beside the INCR of
// the counter. A counter that is not an integer (H7) fails the INCR after
// the key was created: the win is undone and reported as ErrNotLockValue.
func (l *Locker) create(ctx context.Context, key string, ours stamp, cmd redis.Cmder) (created bool, token int64, err error) {
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
	if created, _ := createdBy(cmd); created && isReplyError(incr.Err()) {
		// The EXEC ran (a refusal at queueing would have aborted it): an
		// INCR that fails then can only have found no integer (H7).
		_, _ = l.undoWrite(ctx, key, ours.value)
		return false, 0, errFenceNotCounter(key)
	}
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
