package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Acquiring a lock: one attempt is the SETNX page's three steps (SETNX;
// GET; GETSET of an expired lease) plus recognising our own writes whose
// reply was lost (H5); Acquire repeats attempts, waiting between them
// (wait.go).

// maxStartOvers bounds how often one attempt starts over because the key
// changed under it: it vanished between SETNX and GET (its holder released
// in between), or another client took an expired lease over first.
const maxStartOvers = 3

// TryAcquire makes one attempt to take the lock on key and returns
// ErrNotAcquired at once if another client holds a live lease. A lease whose
// expiry has passed by the Locker's clock is taken over (see deadlock.go).
func (l *Locker) TryAcquire(ctx context.Context, key string) (*Lock, error) {
	lock, _, err := l.tryAcquire(ctx, key, nil)
	return lock, err
}

// refusal is what a refused attempt learned about the lease that refused
// it, so that Acquire sleeps no longer than necessary.
type refusal struct {
	takeableAt time.Time // when the lease can be taken over; zero if unknown
	announced  bool      // its holder is a Locker, which announces its release (wakeup.go)
	unqueued   bool      // a queued attempt could not queue on the key (protocol.go)
}

// tryAcquire is one attempt of the SETNX page's algorithm. When the lock is
// held it also returns what it learned about the holder's lease. A queued
// attempt (entry not nil, see protocol.go) writes entry's token, and claims a
// key that carries it; when refused, entry keeps its place in the queue.
func (l *Locker) tryAcquire(ctx context.Context, key string, entry *queueEntry) (*Lock, refusal, error) {
	if key == "" {
		return nil, refusal{}, fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, refusal{}, fmt.Errorf("setnxlock: acquire %q: %w", key, err)
	}
	for range maxStartOvers {
		lock, refused, startOver, err := l.attempt(ctx, key, entry)
		if !startOver {
			return lock, refused, err
		}
	}
	return nil, refusal{}, fmt.Errorf("%w: %q changed under us %d times in one attempt", ErrNotAcquired, key, maxStartOvers)
}

// attempt is one pass of the page's three steps. startOver reports that
// the key changed under it (released between SETNX and GET, or taken over
// by someone else first): the caller looks again.
func (l *Locker) attempt(ctx context.Context, key string, entry *queueEntry) (lock *Lock, refused refusal, startOver bool, err error) {
	ours := l.newStamp(l.cfg.clock.Now(), entry)

	// Step 1: SETNX key <expiry>; step 2, when the key exists: GET it to
	// read whose lease it is. A queued attempt also claims a key handed to
	// it, or queues.
	claimed, err := l.claimKey(ctx, key, ours, entry)
	if claimed.wrote != nil {
		ours = *claimed.wrote
	}
	if err != nil {
		// H5: the server may have applied SETNX and only the reply was
		// lost, or a 0 may have come from go-redis resending a SETNX whose
		// first copy was applied and the GET failed. Remember the value so
		// the next attempt recognises it as ours instead of waiting out our
		// own lease.
		l.remember(key, ours, entry)
		return nil, refusal{}, false, err
	}
	if claimed.created {
		lock, err := l.won(ctx, key, ours, claimed.fencingToken, entry, !claimed.dequeued)
		return lock, refusal{}, false, err
	}
	if !claimed.found {
		return nil, refusal{}, true, nil // released between SETNX and GET
	}
	now := l.cfg.clock.Now()
	if write, ok := l.recognise(key, claimed.current, ours, now); ok {
		lock, startOver, err := l.ownLostWrite(ctx, key, write, entry)
		return lock, refusal{}, startOver, err
	}
	if refused, err := l.judge(key, claimed, now); err != nil {
		return nil, refused, false, err
	}
	// Step 3: the holder's lease has expired: try to take it over.
	lock, startOver, err = l.takeOver(ctx, key, claimed.current, entry)
	return lock, refusal{}, startOver, err
}

// won hands out a lock its attempt's own write just won, and takes a
// queued attempt's entry off the queue when that write did not (the
// command path after scripts were refused, or a refused ZREM).
func (l *Locker) won(ctx context.Context, key string, ours stamp, fencingToken int64, entry *queueEntry, stillQueued bool) (*Lock, error) {
	if entry != nil && stillQueued {
		l.dequeue(ctx, entry)
	}
	return l.grantReplicated(ctx, key, ours, fencingToken, EventAcquired, entry)
}

// ownLostWrite takes a value of ours whose reply was lost (H5). With
// fencing its token went with the reply: the lease is given up and the
// attempt starts over for a new one.
func (l *Locker) ownLostWrite(ctx context.Context, key string, write stamp, entry *queueEntry) (lock *Lock, startOver bool, err error) {
	if l.cfg.fencing {
		if _, err := l.compareAndWrite(ctx, key,
			func(current string) bool { return current == write.value },
			func(pipe redis.Pipeliner) { pipe.Del(ctx, key) }); err != nil {
			return nil, false, fmt.Errorf("setnxlock: %q: %w", key, err)
		}
		return nil, true, nil
	}
	l.setSafetyNet(ctx, key, write) // H6: the write whose reply was lost may not have got its net
	// Won outside the queue's own steps: the entry must not be handed the
	// key later (one owner per value).
	lock, err = l.won(ctx, key, write, 0, entry, true)
	return lock, false, err
}

// judge reads the lease a claim found (step 2). It returns an error
// matching ErrNotAcquired, with what it learned of the holder's lease,
// while the lease is live; nil when it is over and may be taken over; and
// ErrNotLockValue for a value that is not a lock (H7), left untouched.
func (l *Locker) judge(key string, claimed claimOutcome, now time.Time) (refusal, error) {
	holderExpiry, err := heldUntil(claimed.current)
	if err != nil {
		return refusal{}, fmt.Errorf("setnxlock: key %q: %w", key, err)
	}
	// H4: a foreign lease is over only a skew margin, and our clock's
	// uncertainty, after the end it states, so a clock that runs ahead by
	// less cannot end it early.
	takeable := l.takeableAt(holderExpiry)
	if expired(takeable, now) {
		return refusal{}, nil
	}
	l.observe(Event{Kind: EventContended, Key: key, ExpiresAt: takeable})
	refused := refusal{takeableAt: takeable, announced: tokenOf(claimed.current) != "", unqueued: claimed.unqueued}
	return refused, fmt.Errorf("%w: %q is held until %s", ErrNotAcquired, key, holderExpiry.UTC().Format(time.RFC3339Nano))
}

// newStamp is a lease of the Locker's TTL beginning at now, in its format:
// carrying the token of entry for a queued attempt, else a fresh owner
// token where the format carries one.
func (l *Locker) newStamp(now time.Time, entry *queueEntry) stamp {
	token := ""
	switch {
	case entry != nil:
		token = entry.token
	case l.cfg.format.tokens():
		token = newToken()
	}
	return l.cfg.format.newStamp(now, l.cfg.ttl, token)
}

// remember records a write whose reply was lost (H5), where the format lets
// us recognise it later. A bare timestamp does not: another client writing
// in the same millisecond (or second) with the same TTL writes the very same
// value, so claiming it could hand one lease to two clients. Without a
// token the Locker waits a lost write out instead, as classic clients do.
// A write carrying a queued wait's token belongs to that wait alone
// (protocol.go): it never enters the Locker's memory.
func (l *Locker) remember(key string, write stamp, entry *queueEntry) {
	if !entry.carries(write.value) && l.cfg.format.tokens() {
		l.pending.remember(key, write, l.cfg.clock.Now())
	}
}

// recognise reports whether current, found at key after our SETNX answered
// 0, is a value only we can have written (H5): either go-redis resent this
// attempt's SETNX after losing the reply of a first copy that was applied,
// or it is a remembered write. Only token values are recognised; see
// remember.
func (l *Locker) recognise(key, current string, attempt stamp, now time.Time) (stamp, bool) {
	if !l.cfg.format.tokens() {
		return stamp{}, false
	}
	if current == attempt.value {
		return attempt, true
	}
	return l.pending.take(key, current, now)
}

// grant hands out the lock we just won, unless its lease already ended
// while we waited for Redis's reply (a stall like H8's): a Lock that is over
// before the caller sees it would only invite work outside the lease. The
// lease ends, for us, when we believe it does (H4: ourLeaseEnd).
func (l *Locker) grant(key string, won stamp, fencingToken int64, kind EventKind) (*Lock, error) {
	now := l.cfg.clock.Now()
	ends := l.ourLeaseEnd(won.expiry, now)
	if expired(ends, now) {
		return nil, fmt.Errorf("%w: %q: our lease ended before the reply arrived", ErrNotAcquired, key)
	}
	lock := &Lock{
		locker: l, key: key, token: tokenOf(won.value), value: won.value, fencingToken: fencingToken,
		op: make(chan struct{}, 1), lease: newLease(won.start, ends),
	}
	if !l.cfg.format.tokens() {
		lock.token = ""
	}
	l.observe(Event{Kind: kind, Key: key, ExpiresAt: ends, FencingToken: fencingToken})
	if l.cfg.autoRefresh {
		lock.startKeeper()
	}
	return lock, nil
}

// safetyNet is how long Redis keeps a key whose lease ends in remaining:
// the lease, then the grace period (H6).
func (l *Locker) safetyNet(remaining time.Duration) time.Duration {
	if l.cfg.grace > 0 {
		return remaining + l.cfg.grace
	}
	return remaining + l.cfg.ttl
}

// setSafetyNet gives a key we created with SETNX its Redis expiry (H6).
// SETNX cannot carry one, and a PEXPIRE sent blindly alongside it would
// touch someone else's key when SETNX fails, so it follows the win, at
// once, before anything that may stall.
//
// It is a watched transaction: WATCH with GET of the key, then MULTI,
// PEXPIRE, EXEC only while the key holds exactly won's value. A plain
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
func (l *Locker) setSafetyNet(ctx context.Context, key string, won stamp) {
	net := l.safetyNet(won.length())
	_, _ = l.compareAndWrite(ctx, key,
		func(current string) bool { return current == won.value }, // H10: never onto a later value, ours or a successor's
		func(pipe redis.Pipeliner) { pipe.PExpire(ctx, key, net) })
}

// Acquire takes the lock on key, waiting while another client holds it.
// Where it can it queues on the key, and a Locker's Release hands it the
// lock directly, in order of arrival (handoff.go; see Locker.Close);
// otherwise it is woken as soon as a Locker releases the key (pub/sub, see
// WakeChannel). Either way it also retries with exponential backoff and
// jitter (WithBackoff), never sleeping much past the holder's lease when
// that is known; it retries transient network errors. It has no deadline
// of its own: when ctx ends first it returns an error matching both
// ErrNotAcquired and ctx.Err().
func (l *Locker) Acquire(ctx context.Context, key string) (lock *Lock, err error) {
	w := l.newWaiting(key)
	defer w.end(ctx)
	defer func() {
		if err != nil {
			l.abandonLostWrites(ctx, key)
		}
	}()
	var notReplicated error // the last win the replicas did not acknowledge (WithReplicas): why Acquire never got the lock
	for {
		lock, refused, err := l.tryAcquire(ctx, key, w.nextEntry(ctx))
		if err == nil {
			w.won()
			return lock, nil
		}
		if errors.Is(err, ErrNotReplicated) {
			notReplicated = err
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			if notReplicated != nil {
				err = notReplicated
			}
			return nil, contextEnded(key, ctxErr, err)
		}
		if !retryable(err) {
			return nil, err
		}
		if errors.Is(err, ErrNotAcquired) && w.refused(ctx, refused) {
			continue // attempt once more now that no release can go unheard
		}
		if err := w.sleep(ctx, refused); err != nil {
			return nil, contextEnded(key, err, notReplicated)
		}
	}
}

// abandonLostWrites deletes, when Acquire gives up, the writes on key whose
// reply was lost (H5): nobody will claim them now, and each would hold the
// key for a lease (and on the classic path without its safety net, H6).
// They are taken out of the Locker's memory first, so none has been or can
// be granted, and each is deleted only while the key still holds it
// exactly; waiters are woken. Bounded, whatever ctx says.
func (l *Locker) abandonLostWrites(ctx context.Context, key string) {
	writes := l.pending.takeAll(key)
	if len(writes) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	for _, w := range writes {
		_, _ = l.deleteOwned(ctx, key, func(current string) bool { return current == w.value })
	}
}

// contextEnded is Acquire's error when its context ends: it matches
// ErrNotAcquired and the context's error, and keeps the last attempt's error
// for the message.
func contextEnded(key string, ctxErr, last error) error {
	if errors.Is(last, ErrNotReplicated) {
		return fmt.Errorf("%w: %q: %w (last attempt: %w)", ErrNotAcquired, key, ctxErr, last)
	}
	if last != nil && !errors.Is(last, ErrNotAcquired) && !errors.Is(last, ctxErr) {
		return fmt.Errorf("%w: %q: %w (last attempt: %v)", ErrNotAcquired, key, ctxErr, last)
	}
	return fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ctxErr)
}

// retryable reports whether Acquire should try again after err: yes when
// the lock was held, for transport failures (timeouts, dropped connections)
// and for server replies that say "not now"; no for bad input, foreign
// values (H7), a server that ignores WATCH, a client that was closed (every
// later attempt would fail at once: a spin), and other error replies, which
// a retry would only repeat.
func retryable(err error) bool {
	switch {
	case errors.Is(err, ErrNotAcquired), errors.Is(err, redis.TxFailedErr), errors.Is(err, ErrNotReplicated):
		return true
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrNotLockValue), errors.Is(err, ErrWatchIgnored), errors.Is(err, ErrNoTransactions),
		errors.Is(err, redis.ErrClosed):
		return false
	}
	if _, _, isReply := reply(err); !isReply {
		return true // a transport failure
	}
	return transient(err)
}
