package setnxlock

import (
	"context"
	"time"
)

// Waiting for a group (AcquireMany): attempts at the whole group, all at
// once, with backoff and jitter between them (retry.go), never sleeping
// past the instant the last live lease on its keys can be taken over,
// and woken early by a release of any of its keys: the wait subscribes to
// every key's wake channel and lists itself as a listener in every key's
// queue (wakelisten.go), so that releases by Lockers that hand over
// announce themselves to it too. It never queues: nobody hands a group
// its keys.

// AcquireMany takes the locks on every one of keys at once, all or none,
// waiting while any of them is held; see TryAcquireMany for the Lock it
// returns and the keys it accepts. It retries with exponential backoff and
// jitter (WithBackoff), never sleeping much past the last holder's lease
// when that is known, and is woken as soon as a Locker releases any of the
// keys (pub/sub, see WakeChannel); it retries transient network errors.
// When ctx ends first it returns an error matching both ErrNotAcquired and
// ctx.Err().
//
// The keys are taken in one transaction, so groups that overlap, in any
// order, never deadlock. Groups are not queued: a Locker that releases a
// key hands it to the single-key waiters queued on it (Acquire) in turn,
// and a group that needs that key waits while they keep it busy. That is
// a limit on progress, never on safety: under steady contention for a
// member key, bound the wait with ctx.
func (l *Locker) AcquireMany(ctx context.Context, keys ...string) (lock *Lock, err error) {
	ctx, end := l.beginCall(ctx, CallAcquire, firstKey(keys))
	acq := l.newAcquireCall()
	w := &groupWait{l: l, keys: keys, backoff: newBackoff(l.cfg.minBackoff, l.cfg.maxBackoff)}
	defer w.close(ctx)
	defer func() {
		if err != nil {
			l.abandonLostGroups(ctx, keys)
			acq.failed(ctx, l, firstKey(keys), err)
		}
		if end != nil {
			end(CallResult{Event: acq.won, Err: err})
		}
	}()
	var notReplicated error // the last win the replicas did not acknowledge: why AcquireMany never got the group
	for {
		w.listen(ctx) // before the attempt it relies on the wake-ups after
		lock, held, err := l.tryAcquireMany(ctx, keys, &acq)
		if err == nil {
			return lock, nil
		}
		if err := attemptFailed(ctx, firstKey(keys), err, &notReplicated); err != nil {
			return nil, err
		}
		if acq.wait == WaitNone {
			acq.wait = WaitPoll // until something wakes it
			l.observe(Event{Kind: EventWaiting, Key: firstKey(keys), ExpiresAt: held.takeableAt, Attempts: acq.attempts})
			w.wake = l.subscribeTo(ctx, wakeChannels(keys)...)
		}
		if err := w.sleep(ctx, held); err != nil {
			return nil, contextEnded(firstKey(keys), err, notReplicated)
		}
		acq.wait = w.woke
	}
}

// wakeChannels names the wake channel of each of keys.
func wakeChannels(keys []string) []string {
	channels := make([]string, len(keys))
	for i, key := range keys {
		channels[i] = WakeChannel(key)
	}
	return channels
}

// groupWait is one AcquireMany's wait between attempts.
type groupWait struct {
	l       *Locker
	keys    []string
	backoff *backoff
	wake    *wakeup // the keys' wake-ups, from the first refusal on; nil where pub/sub is off

	listener string   // its member in every key's queue, once listed (wakelisten.go)
	listed   bool     // listed on every key before the last attempt
	woke     WaitKind // what ended the last sleep (Event.Wait)
}

// listen lists the wait on every key's queue before an attempt, once its
// subscription is confirmed, as a single key's wait does (waiting.listen):
// a release before the listing is seen by the attempt, one after is heard.
func (w *groupWait) listen(ctx context.Context) {
	w.listed = false
	if !w.wake.listening() || !w.l.caps.allows(capQueue) {
		return
	}
	if w.listener == "" {
		w.listener = formatListener(newToken())
	}
	w.listed = w.l.listIn(ctx, w.listener, w.keys...)
}

// sleep waits until the next attempt is due: a backoff step (longer while
// every holder announces its release and the wait hears it), cut short at
// the instant the group can be taken over (capAtLease), by a release of
// any key, or by the subscription's confirmation (attempt at once: a
// release before it went unheard). It returns ctx.Err() if ctx ends first.
func (w *groupWait) sleep(ctx context.Context, held heldLease) error {
	wait := w.backoff.next()
	if w.wake.listening() && w.listed && held.announced {
		wait = max(wait, w.l.cfg.announcedPoll) // polling would only load Redis; rarely, in case a release is lost
	}
	if !held.takeableAt.IsZero() {
		wait = capAtLease(wait, held.takeableAt.Sub(w.l.cfg.clock.Now()), w.l.cfg.minBackoff)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	w.woke = WaitPoll
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	case <-w.wake.confirming():
		w.wake.confirmed()
	case <-w.wake.announced():
		w.wake.drain() // one attempt answers every release announced so far
		w.woke = WaitWakeUp
	}
	return nil
}

// close takes the wait's listener off the keys' queues and ends its
// subscription.
func (w *groupWait) close(ctx context.Context) {
	if w.listener != "" {
		w.l.unlistFrom(ctx, w.listener, w.keys...)
	}
	w.wake.close()
}
