package setnxlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reading who leads an election, from the outside: the lock key and the
// record, believed together only while the lease is live and the record
// carries its token.

// Leader reads who leads the election name, without writing anything: one
// round trip with GET of the lock key and of the record. It returns an
// error matching ErrNoLeader when nobody leads: the lock is free, its lease
// is over by the Locker's clock, or its holder has not published a record
// yet. The lease ends when it says: between its end and the end plus the
// skew margin (WithSkewMargin) nobody leads, since the leader has stopped
// and no candidate may take over yet. A lock key or record that holds
// something else is ErrNotLockValue.
func (l *Locker) Leader(ctx context.Context, name string) (Leader, error) {
	if name == "" {
		return Leader{}, fmt.Errorf("%w: empty election name", ErrInvalidArgument)
	}
	var lock, rec *redis.StringCmd
	// Each command's own reply is read below; Pipelined's error is the first of them.
	_, _ = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		lock = pipe.Get(ctx, ElectionKey(name))
		rec = pipe.Get(ctx, LeaderKey(name))
		return nil
	})
	current, found, err := stringReply(lock)
	if err != nil {
		return Leader{}, fmt.Errorf("setnxlock: leader of %q: %w", name, err)
	}
	if !found {
		return Leader{}, fmt.Errorf("%w: %q", ErrNoLeader, name)
	}
	until, err := heldUntil(current)
	if err != nil {
		return Leader{}, fmt.Errorf("setnxlock: leader of %q: %w", name, err)
	}
	if expired(until, l.cfg.clock.Now()) {
		return Leader{}, fmt.Errorf("%w: %q: the last leader's lease ended at %s", ErrNoLeader, name, until.UTC().Format(time.RFC3339Nano))
	}
	published, found, err := stringReply(rec)
	if err != nil {
		return Leader{}, fmt.Errorf("setnxlock: leader record of %q: %w", name, err)
	}
	r, ok := parseRecord(published)
	switch {
	case !found:
		return Leader{}, fmt.Errorf("%w: %q: its lock is held but no leader is published", ErrNoLeader, name)
	case !ok:
		return Leader{}, fmt.Errorf("%w: %s holds %q, not a leader record", ErrNotLockValue, LeaderKey(name), published)
	case r.token != tokenOf(current):
		return Leader{}, fmt.Errorf("%w: %q: its lock is held by a leader that has not published yet", ErrNoLeader, name)
	}
	return Leader{Value: r.value, Term: r.term, ExpiresAt: until, Identity: identityOf(current)}, nil
}
