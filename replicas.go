package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leases that survive a failover (H9). On a primary with replicas, a lease
// written to the primary and not yet replicated is gone after a replica is
// promoted, and a second client can take the key while the first still
// works. WithReplicas makes every write that creates or moves a lease wait
// until enough replicas have it (WAIT), before the lease is granted or
// believed; an acquisition they did not acknowledge is undone.
//
// WAIT counts the replicas that have acknowledged the last write of its
// own connection, and a replica that has one write of the primary's stream
// has every write before it. So after the write that won (a script, SET NX,
// SETNX, a watched GETSET or SET, on whatever pooled connection it went),
// the Locker sends PEXPIRE of the key's safety net (H6) and WAIT together
// on one connection: the PEXPIRE is a write of its own that follows ours
// in the stream, and its acknowledgement is ours. The PEXPIRE is the one
// setSafetyNet sends after a SETNX, whose length makes it safe even if it
// lands late.

// WithReplicas makes every write that creates or moves a lease (a won
// SETNX or SET NX, a takeover, a claimed handoff, Refresh and every
// renewal) wait until n replicas acknowledge it, at most timeout, with
// Redis's WAIT: a plain command, so it works where scripting is disabled.
// An acquisition that fewer replicas acknowledged is undone and reported
// with an error matching ErrNotReplicated (Acquire retries it until its
// context ends: a replica may be catching up; the error it then returns
// matches ErrNotReplicated too); a renewal that fewer acknowledged fails
// like one lost on the network, and is retried while the lease lasts.
//
// It needs the client of one primary (*redis.Client, which
// redis.NewFailoverClient also returns): a Cluster's or a Ring's WAIT
// would go to any node. n must be at least 1; timeout at least 1ms and
// shorter than the client's ReadTimeout, which bounds how long go-redis
// waits for WAIT's reply. Whether n replicas exist is the server's to say:
// with fewer, every acquisition fails with ErrNotReplicated. What it does
// not cover is in the README's guarantees.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *config) error {
		switch {
		case n < 1:
			return fmt.Errorf("%w: WithReplicas needs at least 1 replica, got %d", ErrInvalidArgument, n)
		case timeout < time.Millisecond:
			return fmt.Errorf("%w: WithReplicas timeout %v is below 1ms", ErrInvalidArgument, timeout)
		}
		c.replicas, c.replicaTimeout = n, timeout
		return nil
	}
}

// checkReplicasClient refuses WithReplicas on a client whose WAIT cannot
// be sent on the connection of one primary, or whose reads end before
// WAIT's timeout.
func checkReplicasClient(client redis.UniversalClient, cfg config) error {
	if cfg.replicas == 0 {
		return nil
	}
	single, ok := client.(*redis.Client)
	if !ok {
		return fmt.Errorf("%w: WithReplicas needs the client of one primary (*redis.Client, or redis.NewFailoverClient), not %T", ErrInvalidArgument, client)
	}
	if read := single.Options().ReadTimeout; read > 0 && cfg.replicaTimeout >= read {
		return fmt.Errorf("%w: WithReplicas timeout %v is not shorter than the client's ReadTimeout %v", ErrInvalidArgument, cfg.replicaTimeout, read)
	}
	return nil
}

// replicate waits, with WithReplicas, until enough replicas acknowledge
// the lease write just made on key (see the top of this file); lease is
// the lease written, whose length the safety net is counted from. It
// returns nil without WithReplicas, and an error matching
// ErrNotReplicated when too few acknowledged.
func (l *Locker) replicate(ctx context.Context, key string, lease time.Duration) error {
	if l.cfg.replicas == 0 {
		return nil
	}
	wait := redis.NewIntCmd(ctx, "wait", l.cfg.replicas, l.cfg.replicaTimeout.Milliseconds())
	_, err := l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.PExpire(ctx, key, l.safetyNet(lease))
		_ = pipe.Process(ctx, wait)
		return nil
	})
	if err != nil {
		return fmt.Errorf("setnxlock: WAIT for the replicas of %q: %w", key, err)
	}
	if acked := wait.Val(); acked < int64(l.cfg.replicas) {
		return fmt.Errorf("%w: %q: %d of %d replicas acknowledged within %v", ErrNotReplicated, key, acked, l.cfg.replicas, l.cfg.replicaTimeout)
	}
	return nil
}

// grantReplicated is grant for a lease our write just won, once enough
// replicas have it; otherwise the write is undone (a compare-and-delete of
// our exact value) and the error says why. A win whose replication is
// unknown (WAIT lost on the network) is undone too.
func (l *Locker) grantReplicated(ctx context.Context, key string, won stamp, fencingToken int64, kind EventKind) (*Lock, error) {
	if err := l.replicate(ctx, key, won.length()); err != nil {
		if undoErr := l.undoWrite(ctx, key, won.value); undoErr != nil {
			return nil, errors.Join(err, fmt.Errorf("setnxlock: undo of %q: %w; the lease runs out on its own", key, undoErr))
		}
		return nil, err
	}
	return l.grant(key, won, fencingToken, kind)
}
