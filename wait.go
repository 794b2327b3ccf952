package setnxlock

import (
	"context"
	"time"
)

// How one Acquire call waits between its attempts. It starts listening at
// its first refusal: where the Locker queues, it joins the Locker's
// subscription to handoffs and queues on the key once that is usable
// (handoff.go, queue.go); otherwise it subscribes to the key's wake-ups
// (wakeup.go). Either way it attempts again when woken, when the holder's
// lease ends, and on a timer in case a message is lost: announcedPoll while
// queued, else exponential backoff with jitter (WithBackoff). A
// subscription is made in the background, and the wait polls on its
// backoff until it is confirmed, so a slow or lost confirmation costs
// nothing on a key freed meanwhile. No release can go unheard: once the
// subscription is confirmed the wait attempts once more before it relies
// on it, so a release before that attempt is seen by it, and one after is
// heard.
type waiting struct {
	l       *Locker
	key     string
	backoff *backoff

	listening bool            // it has started listening, at its first refusal
	sub       *subscription   // the Locker's subscription to handoffs it joined, if any
	entry     *queueEntry     // its place in the key's queue, while it queues
	handed    <-chan struct{} // signalled when a release hands the key to entry
	wake      *wakeup         // the key's wake-ups, for a wait that does not queue
}

func (l *Locker) newWaiting(key string) *waiting {
	w := &waiting{l: l, key: key, backoff: newBackoff(l.cfg.minBackoff, l.cfg.maxBackoff)}
	if l.queues() {
		// Already listening (another wait of this Locker, or a recent
		// one): the first attempt may as well queue, saving a refused round
		// trip when the key is held. It costs nothing when it is not.
		if w.sub = l.handoff.joinIfListening(l); w.sub != nil {
			w.listening = true
		}
	}
	return w
}

// nextEntry returns the queue entry the next attempt carries, or nil for
// an attempt outside the queue. A wait queues once its subscription is
// live. It leaves the queue, and waits for wake-ups instead, when the
// subscription ends (Locker.Close, a closed client) or the server refuses
// the queue.
func (w *waiting) nextEntry(ctx context.Context) *queueEntry {
	switch {
	case w.sub == nil:
	case w.entry != nil && (!w.sub.live() || !w.l.queues()):
		w.stopQueueing(ctx)
	case w.entry == nil && w.sub.live() && w.l.queues():
		w.entry = w.l.newQueueEntry(w.key)
		w.handed = w.l.handoff.expect(w.entry.token) // before the entry is pushed
	case w.entry == nil && (subscriptionFailed(w.sub) || !w.l.queues()):
		w.stopQueueing(ctx)
	}
	return w.entry
}

func subscriptionFailed(s *subscription) bool {
	select {
	case <-s.ended:
		return true
	default:
		return false
	}
}

// stopQueueing leaves the queue, if the wait is in it, and the Locker's
// subscription, and subscribes to the key's wake-ups instead.
func (w *waiting) stopQueueing(ctx context.Context) {
	w.leaveQueue(ctx)
	w.l.handoff.leave(w.sub)
	w.sub = nil
	w.wake = w.l.subscribe(ctx, w.key)
}

func (w *waiting) leaveQueue(ctx context.Context) {
	if w.entry == nil {
		return
	}
	// Forget first: a handoff that arrives after that is dropped, and the
	// leave then finds the key carrying the entry's token and hands it on;
	// one that arrives after a leave that failed is declined (abandon).
	w.l.handoff.forget(w.entry.token)
	w.l.leaveQueue(ctx, w.entry)
	w.entry = nil
}

// refused is called after an attempt was refused by a live lease. The
// first time, the wait starts listening, and it reports whether to attempt
// again at once: whether it listens already. A queued attempt
// that could not queue on the key (its queue is not a sorted set, say)
// ends the wait's queueing.
func (w *waiting) refused(ctx context.Context, r refusal) bool {
	if r.unqueued && w.sub != nil {
		w.stopQueueing(ctx)
		return false // it attempts again once its wake-ups are confirmed
	}
	if w.listening {
		return false
	}
	w.listening = true
	if w.l.queues() {
		w.sub = w.l.handoff.join(w.l)
		return w.sub.live() // usually not yet: sleep until it is
	}
	w.wake = w.l.subscribe(ctx, w.key)
	return false // usually not yet confirmed: sleep until it is
}

// won ends a wait whose attempt took the key. The winning write took the
// wait's entry off the queue with it (queued.lua, the takeover), or the
// attempt removed it right after (tryAcquire).
func (w *waiting) won() {
	if w.entry != nil {
		w.l.handoff.forget(w.entry.token)
		w.entry = nil
	}
}

// end releases what the wait held: its place in the queue, if it did not
// win, its share of the Locker's subscription, its wake-ups.
func (w *waiting) end(ctx context.Context) {
	w.leaveQueue(ctx)
	if w.sub != nil {
		w.l.handoff.leave(w.sub)
	}
	w.wake.close()
}

// sleep waits until the next attempt is due, and returns ctx.Err() if ctx
// ends first. refused says what the last attempt learned of the holder's
// lease.
func (w *waiting) sleep(ctx context.Context, refused refusal) error {
	var wait time.Duration
	var handed, ready, ended <-chan struct{}
	switch {
	case w.entry != nil:
		wait, handed, ended = announcedPoll, w.handed, w.sub.ended
	case w.sub != nil:
		wait, ready = w.backoff.next(), w.sub.ready
	default:
		wait = w.backoff.next()
		if w.wake.listening() && refused.announced {
			// The holder will announce its release: polling would only
			// load Redis. Poll rarely, in case the announcement is lost.
			wait = max(wait, announcedPoll)
		}
	}
	if !refused.takeableAt.IsZero() {
		wait = capAtLease(wait, refused.takeableAt.Sub(w.l.cfg.clock.Now()), w.l.cfg.minBackoff)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	case <-handed:
	case <-ready:
	case <-ended:
	case <-w.wake.confirming():
		w.wake.confirmed() // attempt at once: a release before the confirmation went unheard
	case <-w.wake.announced():
		w.wake.drain() // one attempt answers every release announced so far
	}
	return nil
}
