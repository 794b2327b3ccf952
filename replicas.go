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
// the Locker sends, on one connection, WATCH and GET of the key, then
// MULTI, PEXPIRE of its safety net (H6), EXEC, then WAIT. The GET proves
// that the server answering holds our value, so the PEXPIRE that follows
// is a write that comes after ours in that server's stream, and the
// replicas that acknowledge it have ours. Without the GET the count could
// be for another server: a connection a failover client opens to the
// promoted replica, where a PEXPIRE of a key it never got writes nothing
// and WAIT counts every replica at once. The PEXPIRE is watched on our
// value (H10): a late copy of it, landing after a later, longer lease of
// ours or a successor's, is aborted by that lease's write instead of
// cutting its net. go-redis never re-dials inside the transaction, so
// WAIT goes on the connection of the write it counts.
//
// The acknowledgement must come while the lease lasts: WAIT's timeout is
// cut to the lease's remaining time, and an acknowledgement that arrives
// after the end (of the old lease, for a renewal) does not count. A
// renewal acknowledged late could otherwise revive a lease a promoted
// replica, and a contender reading it, had seen end.

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
// not cover is in docs/HOW-IT-WORKS.md, Guarantees and their assumptions.
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
	// WAIT's reply takes a round trip more than its timeout, and a read
	// that times out makes go-redis send the pipeline again.
	if read := single.Options().ReadTimeout; read > 0 && cfg.replicaTimeout > read/2 {
		return fmt.Errorf("%w: WithReplicas timeout %v is more than half the client's ReadTimeout %v", ErrInvalidArgument, cfg.replicaTimeout, read)
	}
	return nil
}

// ourWrite is a value we wrote at a key, which the replicas must have.
type ourWrite struct{ key, value string }

// errNotOurs is replicate's report of a server that does not hold one of
// our writes: another one than took it (a failover), or our lease is over.
var errNotOurs = errors.New("the server answering does not hold our write")

// replicate waits, with WithReplicas, until enough replicas acknowledge
// the lease write just made (see the top of this file): lease is that
// write, others are writes made with it that must survive too (an
// election's record), ends is when the lease (for a renewal, the old one)
// ends by the Locker's clock, and lease length the net is counted from. It
// returns nil without WithReplicas, an error matching ErrNotReplicated when
// too few acknowledged in time or the server answering does not hold our
// writes (then also errNotOurs), and a network error otherwise.
func (l *Locker) replicate(ctx context.Context, lease ourWrite, length time.Duration, ends time.Time, others ...ourWrite) error {
	if l.cfg.replicas == 0 {
		return nil
	}
	timeout := min(l.cfg.replicaTimeout, ends.Sub(l.cfg.clock.Now()))
	if timeout < time.Millisecond {
		return fmt.Errorf("%w: %q: the lease ends before the replicas could acknowledge it", ErrNotReplicated, lease.key)
	}
	notOurs := fmt.Errorf("%w: %q: %w", ErrNotReplicated, lease.key, errNotOurs)
	wait := redis.NewIntCmd(ctx, "wait", l.cfg.replicas, timeout.Milliseconds())
	// WAIT counts the writes of its own connection, so a write of ours goes
	// first on it: a PEXPIRE of our lease's net, watched on our value (H10):
	// a late copy of it is aborted by any later write to the key, so it
	// never cuts a later, longer lease, ours or a successor's.
	err := l.watch(ctx, lease.key, func(tx *redis.Tx, get *redis.StringCmd) error {
		for i, w := range append([]ourWrite{lease}, others...) {
			if i > 0 {
				get = tx.Get(ctx, w.key)
			}
			if current, _, getErr := stringReply(get); getErr == nil && current != w.value {
				return errors.Join(notOurs, unwatch(ctx, tx))
			}
		}
		var expire *redis.BoolCmd
		cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			expire = pipe.PExpire(ctx, lease.key, l.safetyNet(length))
			return nil
		})
		switch {
		case errors.Is(err, redis.TxFailedErr):
			return notOurs // the key changed since we read our value
		case err != nil:
			return withCause(cmds, err)
		case !expire.Val():
			return notOurs
		}
		return tx.Process(ctx, wait)
	})
	if errors.Is(err, errNotOurs) {
		return err
	}
	if err != nil {
		return fmt.Errorf("setnxlock: WAIT for the replicas of %q: %w", lease.key, err)
	}
	if acked := wait.Val(); acked < int64(l.cfg.replicas) {
		return fmt.Errorf("%w: %q: %d of %d replicas acknowledged within %v", ErrNotReplicated, lease.key, acked, l.cfg.replicas, timeout)
	}
	if expired(ends, l.cfg.clock.Now()) {
		return fmt.Errorf("%w: %q: acknowledged only after the lease ended", ErrNotReplicated, lease.key)
	}
	return nil
}
