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
	ctx, end := l.beginCall(ctx, CallTryAcquire, key)
	acq := l.newAcquireCall()
	lock, _, err := l.tryAcquire(ctx, key, "", &acq)
	if end != nil {
		end(CallResult{Event: acq.won, Err: err})
	}
	return lock, err
}

// acquireCall is what one Acquire or TryAcquire call reports of itself
// (Event.Waited, Attempts, Wait), on the call's stack: its attempts count
// it, its wait says how it is waiting, and grant reads it when it wins.
type acquireCall struct {
	start    time.Time // by the Locker's clock; zero without an Observer
	attempts int
	wait     WaitKind // WaitNone until the call starts waiting
	won      Event    // the event of the call's win or failure, for its CallObserver
}

func (l *Locker) newAcquireCall() acquireCall {
	if l.cfg.observer == nil {
		return acquireCall{}
	}
	return acquireCall{start: l.cfg.clock.Now()}
}

// report fills in e, the event of the call's win at now, with what the
// call knows, and keeps it. A lease taken over after a wait was served by
// its holder's end: WaitTakeover.
func (a *acquireCall) report(l *Locker, e *Event, now time.Time) {
	e.Waited, e.Attempts, e.Wait, e.Outcome, e.Path = now.Sub(a.start), a.attempts, a.wait, OutcomeAcquired, l.pathKind()
	if e.Kind == EventRecovered && a.wait != WaitNone {
		e.Wait = WaitTakeover
	}
	a.won = *e
}

// failed reports an Acquire that returned err without the lock
// (EventAcquireFailed), ctx being the call's.
func (a *acquireCall) failed(ctx context.Context, l *Locker, key string, err error) {
	outcome := OutcomeError
	switch ctxErr := ctx.Err(); {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		outcome = OutcomeTimeout
	case errors.Is(ctxErr, context.Canceled):
		outcome = OutcomeCanceled
	}
	a.won = Event{
		Kind: EventAcquireFailed, Key: key, Err: err,
		Waited: l.cfg.clock.Now().Sub(a.start), Attempts: a.attempts, Wait: a.wait, Outcome: outcome,
	}
	l.observe(a.won)
}

// heldLease is what an attempt that found the key held learned about the
// live lease holding it, so that Acquire sleeps no longer than necessary.
type heldLease struct {
	takeableAt time.Time // when the lease can be taken over; zero if unknown
	announced  bool      // its holder is a Locker, which announces its release (wakeup.go)
	unqueued   bool      // a queued attempt could not queue on the key (protocol.go)
}

// tryAcquire is one attempt of the SETNX page's algorithm. When the lock is
// held it also returns what it learned about the holder's lease. An attempt
// of a queued wait (queuedWait, its entry's token; see protocol.go) writes
// that token, and claims a key that carries it; while the key is held, the
// wait keeps its place in the queue.
func (l *Locker) tryAcquire(ctx context.Context, key, queuedWait string, acq *acquireCall) (*Lock, heldLease, error) {
	acq.attempts++
	if key == "" {
		return nil, heldLease{}, fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, heldLease{}, fmt.Errorf("setnxlock: acquire %q: %w", key, err)
	}
	for range maxStartOvers {
		lock, held, startOver, err := l.attempt(ctx, key, queuedWait, acq)
		if !startOver {
			return lock, held, err
		}
	}
	return nil, heldLease{}, fmt.Errorf("%w: %q changed under us %d times in one attempt", ErrNotAcquired, key, maxStartOvers)
}

// attempt is one pass of the page's three steps. startOver reports that
// the key changed under it (released between SETNX and GET, or taken over
// by someone else first): the caller looks again.
func (l *Locker) attempt(ctx context.Context, key, queuedWait string, acq *acquireCall) (lock *Lock, held heldLease, startOver bool, err error) {
	ours := l.attemptStamp(l.cfg.clock.Now(), queuedWait)

	// Step 1: SETNX key <expiry>; step 2, when the key exists: GET it to
	// read whose lease it is. A queued attempt also claims a key handed to
	// it, or queues.
	claimed, err := l.claimKey(ctx, key, ours)
	if claimed.wrote != nil {
		ours = *claimed.wrote
	}
	if err != nil {
		// H5: the server may have applied SETNX and only the reply was
		// lost, or a 0 may have come from go-redis resending a SETNX whose
		// first copy was applied and the GET failed. Remember the value so
		// the next attempt recognises it as ours instead of waiting out our
		// own lease.
		l.remember(key, ours)
		return nil, heldLease{}, false, err
	}
	if claimed.created {
		lock, err := l.grantWin(ctx, key, ours, claimed.fencingToken, !claimed.dequeued, acq)
		return lock, heldLease{}, false, err
	}
	if !claimed.found {
		return nil, heldLease{}, true, nil // released between SETNX and GET
	}
	now := l.cfg.clock.Now()
	if write, ok := l.recognise(key, claimed.current, ours, now); ok {
		lock, startOver, err := l.ownLostWrite(ctx, key, write, acq)
		return lock, heldLease{}, startOver, err
	}
	if held, err := l.judge(key, claimed, now); err != nil {
		return nil, held, false, err
	}
	// Step 3: the holder's lease has expired: try to take it over. An
	// attempt that could not queue (the queue refused, or not a sorted
	// set) takes it over as one that does not queue: a token of its own,
	// and no removal from a queue it has no place in, which would abort or
	// fail the takeover's transaction (review R1, R4).
	if claimed.unqueued {
		queuedWait = ""
	}
	lock, startOver, err = l.takeOver(ctx, key, claimed.current, queuedWait, acq)
	return lock, heldLease{}, startOver, err
}

// grantWin hands out a lock its attempt's own write just won, and takes
// the queued wait it was won for off the queue when that write did not
// (the command path after scripts were refused, or a refused ZREM).
//
// The removal runs whether or not the caller's context has ended, on its
// own short deadline as a leave does (leaveOnce): the lock is handed out
// either way, and every way out of the queue removes the entry
// (protocol.go). An entry left behind would be read at the head of the
// queue by the holder's own release and handed the key, a provisional
// value for a wait that has ended, which nobody claims.
func (l *Locker) grantWin(ctx context.Context, key string, ours stamp, fencingToken int64, stillQueued bool, acq *acquireCall) (*Lock, error) {
	if ours.queuedWait != "" && stillQueued {
		dequeueCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
		l.dequeue(dequeueCtx, l.client, key, ours.queuedWait)
		cancel()
	}
	return l.grantReplicated(ctx, key, ours, fencingToken, EventAcquired, acq)
}

// ownLostWrite takes a value of ours whose reply was lost (H5). With
// fencing its token went with the reply: the lease is given up and the
// attempt starts over for a new one.
func (l *Locker) ownLostWrite(ctx context.Context, key string, write stamp, acq *acquireCall) (lock *Lock, startOver bool, err error) {
	if l.cfg.fencing {
		if _, err := l.compareAndWrite(ctx, key,
			func(current string) bool { return current == write.value },
			func(pipe redis.Pipeliner) { pipe.Del(ctx, key) }); err != nil {
			return nil, false, fmt.Errorf("setnxlock: %q: %w", key, err)
		}
		return nil, true, nil
	}
	l.setSafetyNet(ctx, key, write) // H6: the write whose reply was lost may not have got its net
	// Won outside the queue's own steps: the wait's entry must not be
	// handed the key later (one owner per value).
	lock, err = l.grantWin(ctx, key, write, 0, true, acq)
	return lock, false, err
}

// judge reads the lease a claim found (step 2). It returns an error
// matching ErrNotAcquired, with what it learned of the holder's lease,
// while the lease is live; nil when it is over and may be taken over; and
// ErrNotLockValue for a value that is not a lock (H7), left untouched.
func (l *Locker) judge(key string, claimed claimOutcome, now time.Time) (heldLease, error) {
	holderExpiry, takeable, err := l.takeableFrom(claimed.current)
	if err != nil {
		return heldLease{}, fmt.Errorf("setnxlock: key %q: %w", key, err)
	}
	if expired(takeable, now) {
		return heldLease{}, nil
	}
	l.observe(Event{Kind: EventContended, Key: key, ExpiresAt: takeable})
	held := heldLease{takeableAt: takeable, announced: tokenOf(claimed.current) != "", unqueued: claimed.unqueued}
	return held, fmt.Errorf("%w: %q is held until %s", ErrNotAcquired, key, holderExpiry.UTC().Format(time.RFC3339Nano))
}

// takeableFrom reads the end a found value states (heldUntil) and the
// instant from which judge lets it be taken over. H4: a foreign lease is
// over only a skew margin, and our clock's uncertainty, after the end it
// states, so a clock that runs ahead by less cannot end it early.
func (l *Locker) takeableFrom(value string) (holderExpiry, takeable time.Time, err error) {
	holderExpiry, err = heldUntil(value)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	return holderExpiry, l.takeableAt(holderExpiry), nil
}

// liveLease reports whether value is a lease that judge would call live
// at now; a value that is not a lock value (H7) is not one.
func (l *Locker) liveLease(value string, now time.Time) bool {
	_, takeable, err := l.takeableFrom(value)
	return err == nil && !expired(takeable, now)
}

// recognise reports whether current, found at key after our SETNX answered
// 0, is a value only we can have written (H5): either go-redis resent this
// attempt's SETNX after losing the reply of a first copy that was applied,
// or it is a remembered write, which the attempt claims for its queued
// wait, if any. Only token values are recognised; see remember.
func (l *Locker) recognise(key, current string, attempt stamp, now time.Time) (stamp, bool) {
	if !l.cfg.format.tokens() {
		return stamp{}, false
	}
	if current == attempt.value {
		return attempt, true
	}
	if write, ok := l.pending.take(key, current, now); ok {
		write.queuedWait = attempt.queuedWait
		return write, true
	}
	return stamp{}, false
}

// Acquire takes the lock on key, waiting while another client holds it.
// Where it can it queues on the key, and a Locker's Release hands it the
// lock directly, in order of arrival (handoff.go; see Locker.Close). A
// lock handed over is returned as soon as the Locker hears of it, while
// its claim is still on its way: until the claim is confirmed its lease
// (ExpiresAt) is the handoff's, 250ms at most, and a claim that fails
// ends the lock as lost (Done, Err) no later than that (heard.go);
// otherwise it is woken as soon as a Locker releases the key (pub/sub, see
// WakeChannel). Either way it also retries with exponential backoff and
// jitter (WithBackoff), never sleeping much past the holder's lease when
// that is known; it retries transient network errors. It has no deadline
// of its own: when ctx ends first it returns an error matching both
// ErrNotAcquired and ctx.Err().
func (l *Locker) Acquire(ctx context.Context, key string) (lock *Lock, err error) {
	ctx, end := l.beginCall(ctx, CallAcquire, key)
	acq := l.newAcquireCall()
	w := l.newWaiting(key)
	defer w.close(ctx)
	defer func() {
		if err != nil {
			l.abandonLostWrites(ctx, key)
			acq.failed(ctx, l, key, err)
		}
		if end != nil {
			end(CallResult{Event: acq.won, Err: err})
		}
	}()
	var notReplicated error // the last win the replicas did not acknowledge (WithReplicas): why Acquire never got the lock
	for {
		if lock := w.holdHeard(&acq); lock != nil {
			w.tookKey() // the release took the entry off the queue; so does the claim
			return lock, nil
		}
		queuedWait := w.nextQueued(ctx)
		w.listen(ctx) // on wake-ups: before the attempt it relies on them after
		lock, held, err := l.tryAcquire(ctx, key, queuedWait, &acq)
		if err == nil {
			w.tookKey()
			return lock, nil
		}
		if err := attemptFailed(ctx, key, err, &notReplicated); err != nil {
			return nil, err
		}
		if acq.wait == WaitNone {
			acq.wait = WaitPoll // until something wakes it
			l.observe(Event{Kind: EventWaiting, Key: key, ExpiresAt: held.takeableAt, Attempts: acq.attempts})
		}
		if errors.Is(err, ErrNotAcquired) && w.keyHeld(ctx, held) {
			continue // attempt once more now that no release can go unheard
		}
		if err := w.sleep(ctx, held); err != nil {
			return nil, contextEnded(key, err, notReplicated)
		}
		acq.wait = w.woke
	}
}

// attemptFailed is what a waiting call (Acquire, AcquireMany) does with
// the error of an attempt on key: it keeps a win the replicas did not
// acknowledge in notReplicated, why the call may never get the lock, and
// returns the call's error when the wait is over (its context ended, or
// err is not worth retrying), else nil: wait and attempt again.
func attemptFailed(ctx context.Context, key string, err error, notReplicated *error) error {
	if errors.Is(err, ErrNotReplicated) {
		*notReplicated = err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		if *notReplicated != nil {
			err = *notReplicated
		}
		return contextEnded(key, ctxErr, err)
	}
	if !retryable(err) {
		return err
	}
	return nil
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
