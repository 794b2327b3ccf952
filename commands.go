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

// claim is SET NX PX GET where the server has it (setget.go), else SETNX
// (or SET NX PX) and, when the key exists, GET.
func (p commandPath) claim(ctx context.Context, key string, ours stamp) (claimOutcome, error) {
	if c, sent, err := p.l.claimBySetGet(ctx, key, ours); sent {
		return c, err
	}
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
		incr = pipe.Incr(ctx, l.fenceCounter(key))
		return nil
	})
	if created, _ := createdBy(cmd); created && isReplyError(incr.Err()) {
		// The EXEC ran (a refusal at queueing would have aborted it): an
		// INCR that fails then can only have found no integer (H7).
		_, _ = l.undoWrite(ctx, key, ours.value)
		return false, 0, errFenceNotCounter(l.fenceCounter(key))
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

// setSafetyNet gives a key we created with SETNX its Redis expiry (H6).
// SETNX cannot carry one, and a PEXPIRE sent blindly alongside it would
// touch someone else's key when SETNX fails, so it follows the win, at
// once, before anything that may stall.
//
// It is a watched transaction: WATCH with GET of the key, then MULTI,
// PEXPIRE, EXEC only while the key holds exactly the value of ours. A plain
// PEXPIRE would be an unconditional write that can move a lease back
// (H10): a late copy of it (held in the network past the ReadTimeout, or
// the first copy of a go-redis retry) that lands after a Refresh longer
// than TTL + grace, or on a successor's key of a longer lease or of a
// classic client that sets no expiry, makes Redis delete the key while
// that lease is live. The EXEC goes out only once the WATCH has been
// answered, on the WATCH's connection, so a late EXEC runs after every
// later write of ours or of a successor to the key, and any of them
// aborts it; one that runs finds the key as the GET saw it, ours, and its
// net, counted from when it runs, ends after our lease. So the net never
// ends a live lease, whoever holds it.
//
// The cost is one round trip more than a plain PEXPIRE on a single server
// (WATCH with GET, then MULTI/PEXPIRE/EXEC; two more on a Cluster, where
// WATCH goes alone), paid only where the net cannot go with the write: the
// classic commands (WithClassicCommands, or a server that refuses SET's NX
// and PX) and a write of ours recognised after its reply was lost (H5).
// PEXPIRE's NX option (Redis 7.0) would save that round trip but is no
// fast path here: a server that has it takes SET NX PX and comes here only
// when asked for the classic commands alone, and a late copy of it still
// sets our net on a successor's key that has none yet (a classic client's,
// or a Locker's before its own net, which NX then refuses).
//
// It is best effort: if it fails, the key behaves like a classic lock
// until a refresh or a takeover sets the net.
func (l *Locker) setSafetyNet(ctx context.Context, key string, ours stamp) {
	net := l.safetyNet(ours.length())
	_, _ = l.compareAndWrite(ctx, key,
		func(current string) bool { return current == ours.value }, // H10: never onto a later value, ours or a successor's
		func(pipe redis.Pipeliner) { pipe.PExpire(ctx, key, net) })
}
