package setnxlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The record of who leads (LeaderKey): written only while the lock key
// holds the leader's lease, in a transaction watched on it, and announced
// on LeaderChannel; deleted on Resign only while it is still ours.

// publish writes the leadership's record while the lock key still holds
// its lease (write, then announce: the record is written in a transaction
// watched on the lock key, and published in it), retrying network errors
// while ctx and the lease last. It returns nil only when the record is
// written and the lease is still live by the Locker's clock.
func (l *Locker) publish(ctx context.Context, lead *Leadership) error {
	k := lead.lock
	record := formatRecord(k.FencingToken(), k.token, lead.value)
	// H7: a record key that holds something else is left alone. (Read
	// apart from the write: it guards against a mistake, not a race.)
	if current, found, err := l.get(ctx, LeaderKey(lead.name)); err != nil {
		return fmt.Errorf("setnxlock: leader record of %q: %w", lead.name, err)
	} else if _, ok := parseRecord(current); found && !ok {
		return fmt.Errorf("%w: %s holds %q, not a leader record; left untouched", ErrNotLockValue, LeaderKey(lead.name), current)
	}
	retry := newBackoff(l.cfg.minBackoff, l.cfg.maxBackoff)
	for {
		announce := l.caps.allows(capPubSub)
		written, err := l.compareAndWrite(ctx, k.key,
			func(current string) bool { return tokenOf(current) == k.token },
			func(pipe redis.Pipeliner) {
				pipe.Set(ctx, LeaderKey(lead.name), record, 0)
				if announce {
					pipe.Publish(ctx, LeaderChannel(lead.name), record)
				}
			})
		switch {
		case err == nil && !written:
			return fmt.Errorf("%w: %q no longer holds our value", ErrNotHeld, k.key)
		case err == nil:
			// H9: with WithReplicas, the lock and the record must both
			// survive a failover before anyone is told who leads.
			err = l.replicateLeadership(ctx, lead, record)
			if err == nil {
				// The record went out while the key was ours; the lease
				// may still have ended by our clock meanwhile (a stall, H8).
				if k.Err() != nil || expired(k.ExpiresAt(), l.cfg.clock.Now()) {
					return errLeaseOver
				}
				return nil
			}
			if !retryable(err) {
				return err
			}
		case announce && l.caps.narrow(capPubSub, err):
			// Refused: write the record without the announcement (once;
			// if the record itself is refused, that run says so).
			continue
		case !retryable(err):
			return err
		}
		timer := time.NewTimer(retry.next())
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-k.Done():
			timer.Stop()
			return errLeaseOver
		case <-timer.C:
		}
	}
}

// replicateLeadership waits, with WithReplicas, until the replicas have
// the leadership's lock value and its record, on the server that holds
// them (replicate). It holds the lock's turn to talk to Redis, so that no
// renewal changes the value meanwhile.
func (l *Locker) replicateLeadership(ctx context.Context, lead *Leadership, record string) error {
	if l.cfg.replicas == 0 {
		return nil
	}
	k := lead.lock
	return k.inTurn(ctx, "publish", func() error {
		ends := k.ExpiresAt()
		return l.replicate(ctx, ourWrite{k.key, k.value}, ends.Sub(k.lease.began()), ends, ourWrite{LeaderKey(lead.name), record})
	}, k.lostWith("publish"))
}

// unpublish deletes the election's record if it carries token, and
// announces on LeaderChannel that nobody leads, in one transaction watched
// on the record.
func (l *Locker) unpublish(ctx context.Context, name, token string) error {
	for {
		publish := l.caps.allows(capPubSub)
		_, err := l.compareAndWrite(ctx, LeaderKey(name),
			func(current string) bool { r, ok := parseRecord(current); return ok && r.token == token },
			func(pipe redis.Pipeliner) {
				pipe.Del(ctx, LeaderKey(name))
				if publish {
					pipe.Publish(ctx, LeaderChannel(name), "")
				}
			})
		if !publish || !l.caps.narrow(capPubSub, err) {
			return err
		}
	}
}

// leaderRecord is a parsed LeaderKey value.
type leaderRecord struct {
	term  int64
	token string
	value string
}

func formatRecord(term int64, token, value string) string {
	return strconv.FormatInt(term, 10) + ":" + token + ":" + value
}

// parseRecord reads "<term>:<token>:<value>"; the value may contain ':'.
func parseRecord(s string) (leaderRecord, bool) {
	termText, rest, ok := strings.Cut(s, ":")
	if !ok {
		return leaderRecord{}, false
	}
	term, err := strconv.ParseInt(termText, 10, 64)
	if err != nil || term < 1 {
		return leaderRecord{}, false
	}
	token, value, ok := strings.Cut(rest, ":")
	if !ok || token == "" {
		return leaderRecord{}, false
	}
	return leaderRecord{term: term, token: token, value: value}, true
}
