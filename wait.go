package setnxlock

import (
	"context"
	"time"
)

// How one Acquire call waits between its attempts, in one of the modes
// below (waitMode). It starts listening once it first finds the key held:
// where the Locker queues, it joins the Locker's subscription to handoffs
// and queues on the key once that is usable (handoff.go, protocol.go);
// otherwise it subscribes to the key's wake-ups (wakeup.go). Either way it
// attempts again when woken, when the holder's lease ends, and on a timer
// in case a message is lost: announcedPoll while queued, else exponential
// backoff with jitter (WithBackoff). A subscription is made in the
// background, and the wait polls on its backoff until it is confirmed, so
// a slow or lost confirmation costs nothing on a key freed meanwhile. No
// release can go unheard: once the subscription is confirmed the wait
// attempts once more before it relies on it, so a release before that
// attempt is seen by it, and one after is heard.
type waiting struct {
	l       *Locker
	key     string
	backoff *backoff
	mode    waitMode

	sub    *subscription      // joining, queued: the Locker's subscription to handoffs
	entry  *queueEntry        // queued: its place in the key's queue
	handed <-chan handoffNote // queued: what its Locker heard for entry (route.go)
	heard  handoffNote        // queued: the last handoff heard, not yet acted on (heard.go)
	wake   *wakeup            // wakeUps: the key's wake-ups; nil where pub/sub is off

	listener string // wakeUps: its member in the key's queue (wakelisten.go)
	listed   bool   // wakeUps: listed before the last attempt, so a release announces itself

	woke WaitKind // what ended the last sleep, for the observer (Event.Wait)
}

// waitMode is how a wait waits; it only ever moves down this list.
type waitMode int

const (
	polling waitMode = iota // before it first finds the key held: backoff alone
	joining                 // it joined the Locker's subscription to handoffs, not yet usable
	queued                  // in the key's queue: a release hands it the key
	wakeUps                 // it listens to the key's wake-ups, or polls where it cannot
	served                  // it won the key
)

func (l *Locker) newWaiting(key string) *waiting {
	w := &waiting{l: l, key: key, backoff: newBackoff(l.cfg.minBackoff, l.cfg.maxBackoff)}
	if l.queues() {
		// Already listening (another wait of this Locker, or a recent
		// one): the first attempt may as well queue, saving a round trip
		// when the key is held. It costs nothing when it is not.
		if w.sub = l.handoff.joinIfListening(l); w.sub != nil {
			w.mode = joining
		}
	}
	return w
}

// nextQueued returns the token of the wait's queue entry, which the next
// attempt writes and claims, or "" for an attempt outside the queue. A
// joining wait queues once its subscription is live. A wait leaves the
// queue, and waits for wake-ups instead, when the subscription ends
// (Locker.Close, a closed client) or the server refuses the queue.
func (w *waiting) nextQueued(ctx context.Context) string {
	switch {
	case w.mode == queued && (!w.sub.live() || !w.l.queues()):
		w.stopQueueing(ctx)
	case w.mode == joining && w.sub.live() && w.l.queues():
		w.mode = queued
		w.entry = w.l.newQueueEntry(w.key)
		w.handed = w.l.handoff.expect(w.entry.token) // before the entry is pushed
	case w.mode == joining && (subscriptionFailed(w.sub) || !w.l.queues()):
		w.stopQueueing(ctx)
	}
	if w.mode != queued {
		return ""
	}
	return w.entry.token
}

func subscriptionFailed(s *subscription) bool {
	select {
	case <-s.stopped:
		return true
	default:
		return false
	}
}

// stopQueueing leaves the queue, if the wait is in it, and the Locker's
// subscription, and subscribes to the key's wake-ups instead.
func (w *waiting) stopQueueing(ctx context.Context) {
	w.leaveQueue(ctx)
	w.l.handoff.unjoin(w.sub)
	w.sub = nil
	w.mode, w.wake = wakeUps, w.l.subscribe(ctx, w.key)
}

func (w *waiting) leaveQueue(ctx context.Context) {
	if w.mode != queued {
		return
	}
	// Decline first (abandon): a handoff to the entry that arrives from
	// now on is handed on (route), and one written before the leave is
	// handed on by the leave itself, which finds the key carrying the
	// entry's token. The entry stays declined for leaveTimeout after the
	// leave, for a handoff written after it by a release that read the
	// queue before it: its WATCH on the queue should abort it, but a
	// server whose WATCH misses a ZREM that leaves other members (miniredis
	// v2.40) lets it through. A leave that fails keeps it declined for as
	// long as the queue lives (leaveOnce).
	now := w.l.cfg.clock.Now()
	w.l.handoff.abandon(w.entry, now, now.Add(leaveTimeout))
	w.l.leaveOnce(ctx, w.entry)
	w.entry, w.handed, w.heard = nil, nil, handoffNote{}
}

// keyHeld is called after an attempt found the key held by a live lease.
// The first time, the wait starts listening, and it reports whether to
// attempt again at once: whether it listens already. A queued attempt that could
// not queue on the key (its queue is not a sorted set, say) ends the
// wait's queueing.
func (w *waiting) keyHeld(ctx context.Context, held heldLease) bool {
	switch {
	case held.unqueued && (w.mode == joining || w.mode == queued):
		w.stopQueueing(ctx)
		return false // it attempts again once its wake-ups are confirmed
	case w.mode != polling:
		return false
	case w.l.queues():
		w.mode, w.sub = joining, w.l.handoff.join(w.l)
		return w.sub.live() // usually not yet: sleep until it is
	}
	w.mode, w.wake = wakeUps, w.l.subscribe(ctx, w.key)
	return false // usually not yet confirmed: sleep until it is
}

// holdHeard is a Lock on the key a handoff the wait heard gives it
// (heard.go), held before its claim is confirmed; nil when it heard none,
// or must claim the key first (the next attempt does).
func (w *waiting) holdHeard(acq *acquireCall) *Lock {
	note := w.heard
	w.heard = handoffNote{}
	if w.mode != queued {
		return nil
	}
	if note.handoff() && note.key != w.key {
		// Another permit of a semaphore whose permits share one queue
		// (semwait.go), handed to this Locker's wait on one permit key:
		// not the key waited for, so declined, handed on at once.
		go w.l.leaveOnce(context.Background(), w.entry.at(note.key))
		return nil
	}
	return w.l.holdHeard(w.key, w.entry, note, acq)
}

// tookKey ends a wait whose attempt took the key. The winning write took the
// wait's entry off the queue with it (queued.lua, the takeover), or the
// attempt removed it right after (tryAcquire).
func (w *waiting) tookKey() {
	if w.mode == queued {
		w.l.handoff.forget(w.entry.token)
		w.entry, w.handed, w.heard = nil, nil, handoffNote{}
	}
	w.mode = served
}

// close releases what the wait held: its place in the queue, if it did not
// win, its listener in it (wakelisten.go), its share of the Locker's subscription, its wake-ups.
func (w *waiting) close(ctx context.Context) {
	w.leaveQueue(ctx)
	w.unlist(ctx)
	if w.sub != nil {
		w.l.handoff.unjoin(w.sub)
	}
	w.wake.close()
}

// sleep waits until the next attempt is due, and returns ctx.Err() if ctx
// ends first. held says what the last attempt learned of the holder's
// lease: a queued wait attempts exactly when it is over by the Locker's
// clock, never earlier (leasewake.go); other waits a jitter after it
// (capAtLease).
func (w *waiting) sleep(ctx context.Context, held heldLease) error {
	var wait time.Duration
	var handed <-chan handoffNote
	var ready, stopped <-chan struct{}
	switch w.mode {
	case queued:
		wait, handed, stopped = w.l.cfg.announcedPoll, w.handed, w.sub.stopped
	case joining:
		wait, ready = w.backoff.next(), w.sub.ready
	default:
		wait = w.backoff.next()
		if w.wake.listening() && w.listed && held.announced {
			// The holder will announce its release: polling would only
			// load Redis. Poll rarely, in case the announcement is lost.
			wait = max(wait, w.l.cfg.announcedPoll)
		}
	}
	var leaseEnd <-chan time.Time // the lease's end by the clock, once the early timer fired (leasewake.go)
	precise := false
	if !held.takeableAt.IsZero() {
		remaining := held.takeableAt.Sub(w.l.cfg.clock.Now())
		switch {
		case remaining >= wait:
		case w.mode == queued:
			wait, precise = leaseWake(remaining), true
		default:
			wait = capAtLease(wait, remaining, w.l.cfg.minBackoff) // a herd of pollers: spread
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var abandon chan struct{} // ends the wait for leaseEnd
	defer func() {
		if abandon != nil {
			close(abandon)
		}
	}()
	w.woke = WaitPoll // the timers, and a subscription made or ended
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			if precise && !spinUntil(ctx, w.l.cfg.clock, held.takeableAt) {
				abandon = make(chan struct{})
				leaseEnd = at(w.l.cfg.clock, held.takeableAt, abandon) // never attempt before it
				continue
			}
		case <-leaseEnd:
		case w.heard = <-handed:
			w.woke = WaitBarging // a key left free for the first in line to race for
			if w.heard.handoff() {
				w.woke = WaitHandoff
			}
		case <-ready:
		case <-stopped:
		case <-w.wake.confirming():
			w.wake.confirmed() // attempt at once: a release before the confirmation went unheard
		case <-w.wake.announced():
			w.wake.drain() // one attempt answers every release announced so far
			w.woke = WaitWakeUp
		}
		return nil
	}
}
