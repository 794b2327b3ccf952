package setnxlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// An unqueued attempt's first step in one command, on both paths: where
// the server takes SET's NX option with GET (Redis 7.0 and later), SET key
// <ours> NX PX <safety net> GET creates the key with its net (H6) or, when
// the key exists, leaves it untouched and answers the holder's value. That
// is SETNX and GET at once, atomically: no release can fall between them,
// so the attempt never starts over for that. Without fencing only: the
// fencing token must be drawn with the win, which takes a script
// (acquire.lua) or a transaction (commands.go).
//
// H5: go-redis may resend the command after losing the reply of a first
// copy that the server applied; the resend answers our own value, which
// recognise takes for ours.

// claimBySetGet sends SET key <ours> NX PX <net> GET while the Locker may.
// sent is false when it did not send it, or the server refused it (a
// syntax error before Redis 7.0, an unknown option on a proxy): the
// capability is then off for good and the caller takes its usual way at
// once, since a refused command did not run. A reply of WRONGTYPE is H7:
// the key, not a string, is left untouched.
func (l *Locker) claimBySetGet(ctx context.Context, key string, ours stamp) (c claimOutcome, sent bool, err error) {
	if l.cfg.fencing || !l.caps.allows(capSetGet) {
		return claimOutcome{}, false, nil
	}
	cmd := redis.NewStringCmd(ctx, "set", key, ours.value, "nx", "px", l.netArg(ours.length()), "get")
	_ = l.client.Process(ctx, cmd)
	current, err := cmd.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return claimOutcome{created: true}, true, nil
	case err == nil:
		return claimOutcome{current: current, found: true}, true, nil
	case l.caps.narrow(capSetGet, err):
		return claimOutcome{}, false, nil
	case isWrongType(err):
		return claimOutcome{}, true, errors.Join(ErrNotLockValue, err)
	}
	return claimOutcome{}, true, fmt.Errorf("setnxlock: SET NX GET %q: %w", key, err)
}
