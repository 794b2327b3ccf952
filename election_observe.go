package setnxlock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Following an election from the outside (Observe): a goroutine reads
// Leader whenever something may have changed, and hands the latest change
// to the reader. It reads when a new leader publishes or one resigns
// (LeaderChannel), when the lock is released (WakeChannel of the election
// key), when the current leader's lease ends by the Locker's clock (a
// leader that crashed announces nothing), and on a timer in case a message
// is lost. Only a read changes what it reports: an observer that cannot
// read goes on reporting the last leader it read, since the leader may
// well have renewed meanwhile.

// observePoll is how often an observer whose subscription is confirmed
// reads the leader anyway, in case a message was lost; until it is
// confirmed, or where pub/sub is refused, it reads on the Locker's maximum
// backoff.
const observePoll = time.Second

// Observe follows the election name until ctx ends, then closes the
// returned channel. It delivers the current leader at once when there is
// one, then each change: a new leader (in increasing term order; a read
// that shows an older term than one already seen is dropped), or the zero
// Leader when the leader's leadership ends with no successor (it resigned,
// or its lease ran out by the Locker's clock). A reader that falls behind
// receives the latest state, never a stale one after a newer one: changes
// it did not take in time are replaced. Renewals are not changes. A leader
// once reported gone is not reported again; every report comes from a
// read, so while Redis cannot be read the last one stands. An empty name,
// which no election has, gives a channel that is closed at once; a closed
// client (redis.ErrClosed) closes it too.
func (l *Locker) Observe(ctx context.Context, name string) <-chan Leader {
	out := make(chan Leader)
	if name == "" {
		close(out)
		return out
	}
	go l.follow(ctx, name, out)
	return out
}

// follower is what an observer knows: the latest state it has read, and
// whether the reader has yet to receive it.
type follower struct {
	latest  Leader // the zero Leader: nobody leads
	term    int64  // the highest term read so far; 0 before any leader
	pending bool   // latest has not been delivered
}

// saw folds one read of Leader into what the follower knows.
func (f *follower) saw(current Leader, err error) {
	switch {
	case err == nil && current.Term > f.term:
		f.latest, f.term, f.pending = current, current.Term, true
	case err == nil && current.Term == f.term && f.latest.Term == current.Term:
		f.latest.ExpiresAt = current.ExpiresAt // a renewal: not a change
	case errors.Is(err, ErrNoLeader) && f.latest.Term != 0:
		f.latest, f.pending = Leader{}, true
	}
	// Anything else is older than what is known (a stale read, a leader
	// already reported gone) or a failed read: nothing changes.
}

func (l *Locker) follow(ctx context.Context, name string, out chan<- Leader) {
	defer close(out)
	wake := l.subscribeTo(ctx, LeaderChannel(name), WakeChannel(ElectionKey(name)))
	defer wake.close()
	var f follower
	for {
		current, err := l.Leader(ctx, name)
		if errors.Is(err, redis.ErrClosed) {
			return // every later read would fail at once
		}
		f.saw(current, err)
		if !l.deliverUntilChange(ctx, &f, out, wake) {
			return
		}
	}
}

// deliverUntilChange offers the follower's pending state to the reader
// until there may be something new to read: a message, the current
// leader's lease ending, or the poll timer. It returns false when ctx ends.
func (l *Locker) deliverUntilChange(ctx context.Context, f *follower, out chan<- Leader, wake *wakeup) bool {
	poll := l.cfg.maxBackoff
	if wake.listening() {
		poll = observePoll
	}
	timer := time.NewTimer(poll)
	defer timer.Stop()
	var leaseEnds <-chan time.Time
	if f.latest.Term != 0 && f.latest.ExpiresAt.After(l.cfg.clock.Now()) {
		// Not once the end has passed: a read that failed then would
		// make it fire at once, a spin; the poll covers that case.
		abandon := make(chan struct{})
		defer close(abandon)
		leaseEnds = at(l.cfg.clock, f.latest.ExpiresAt, abandon)
	}
	for {
		var send chan<- Leader
		if f.pending {
			send = out
		}
		select {
		case <-ctx.Done():
			return false
		case send <- f.latest:
			f.pending = false
			continue // nothing new to read yet
		case <-timer.C:
		case <-leaseEnds:
		case <-wake.confirming():
			wake.confirmed() // read at once: a change before the confirmation went unheard
		case <-wake.announced():
			wake.drain() // one read answers every message so far
		}
		return true
	}
}
