package setnxlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Waiting for a permit in the semaphore's one queue. Where the Locker
// queues (handoff.go), every permit of a semaphore shares one queue,
// waitersKey(PermitsKey(name)) (Locker.waitersOf): a wait has one entry in
// it, and a release of any permit hands that permit to the semaphore's
// first waiter, exactly as a lock's release hands its key on (release.lua,
// handon.lua, commandhandon.go; the protocol is protocol.go's, unchanged:
// only the queue a permit names is shared). The handoff's payload names
// the permit handed, and the wait holds it as a lock's wait holds a key
// handed to it (heard.go).
//
// Its attempts are a lock's queued attempts, one per permit, all with the
// wait's one token (protocol.go's enqueueOrClaim): each creates a free
// permit, or claims one handed to the wait, or keeps the wait's one place
// in line (taken by the first attempt that finds its permit held). So
// waiters are served in arrival order across all the permits, and a
// release costs one handoff, not one per waiter per permit.
//
// One owner per value: a value carrying the wait's token may be written on
// more than one permit (a handoff of one while the wait's attempt on
// another, its place taken by the handoff, queued it again and was handed
// a second). The wait keeps the first permit it holds; the others are
// declined (handed on) by its Locker, as they are heard, and the one it
// keeps never is (abandonedEntry.held).

// queue names the semaphore's one queue, in the slot of its permits.
func (s *Semaphore) queue() string { return waitersKey(PermitsKey(s.name)) }

// permitIndex returns the index of the permit key names, whatever the
// count: key is PermitKey(s.name, i) for exactly one i >= 0, or ok is
// false.
func (s *Semaphore) permitIndex(key string) (i int, ok bool) {
	prefix := sameSlotKey(s.name, permitSuffix)
	digits, found := strings.CutPrefix(key, prefix)
	if !found {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	if err != nil || i < 0 || strconv.Itoa(i) != digits {
		return 0, false
	}
	return i, true
}

// waitInLine waits for one of n permits in the semaphore's queue, until
// it holds one or ctx ends (the error then matches ErrNotAcquired and
// ctx.Err()). queued is false when the wait could not queue (the Locker
// does not queue, its subscription failed, the server refused the queue):
// nothing of it is left, and the caller waits on each permit instead.
// heard says the permit was handed to the wait and heard (holdHeard): its
// handoff checked it against the recorded count (protocol.go).
func (s *Semaphore) waitInLine(ctx context.Context, n int) (lock *Lock, heard, queued bool, err error) {
	l := s.locker
	if !l.queues() {
		return nil, false, false, nil
	}
	sub := l.handoff.join(l)
	defer l.handoff.unjoin(sub)
	select {
	case <-sub.ready: // bounded by the subscription's timeout
	case <-ctx.Done():
		return nil, false, true, s.notAcquired(n, nil, ctx.Err())
	}
	if !sub.live() || !l.queues() {
		return nil, false, false, nil
	}
	token := newToken()
	entry := l.queueEntryOf(s.permitKey(0), token)
	// One call for the observer, as Locker.Acquire reports one, named by
	// the first permit; its events name the permit each is about.
	ctx, end := l.beginCall(ctx, CallAcquire, entry.key)
	acq := l.newAcquireCall()
	handed := l.handoff.expectMany(token, n+1) // a note per permit and a wake-up: none replaces a handoff
	defer func() {
		if lock == nil {
			s.leaveLine(ctx, entry, n)
		}
		if err != nil {
			acq.failed(ctx, l, entry.key, err)
		}
		if end != nil {
			end(CallResult{Event: acq.won, Err: err})
		}
	}()
	retry := newBackoff(l.cfg.minBackoff, l.cfg.maxBackoff)
	var (
		note          handoffNote
		notReplicated error
	)
	for {
		if i, ok := s.permitIndex(note.key); note.handoff() && ok && i < n {
			if lock := l.holdHeard(note.key, entry.at(note.key), note, &acq); lock != nil {
				s.served(ctx, entry, lock.key, n, handed)
				return lock, true, true, nil
			}
		} else if note.handoff() && ok {
			// A permit at or past this wait's count, handed to its entry
			// within the recorded count: the count grew since the wait
			// agreed (Resize). Not the wait's to take, and not to be left
			// to its claim window: declined at once, handed on to the next
			// in line through the semaphore's queue (s.permitKey names it).
			s.decline(ctx, entry.at(s.permitKey(i)))
		}
		note = handoffNote{}
		if !sub.live() || !l.queues() {
			return nil, false, false, nil // left by the deferred leave
		}
		var (
			foreign   []error
			transient bool
			takeable  time.Time // the earliest end of a live lease found
		)
		start := int((s.next.Add(1) - 1) % uint64(n))
		var worth []bool // after the first attempt: which permits an attempt could win
		for j := range n {
			i := (start + j) % n
			if j == 1 {
				worth, takeable = s.lookInLine(ctx, n, token, takeable)
			}
			if worth != nil && !worth[i] {
				continue
			}
			key := s.permitKey(i)
			lock, held, err := l.tryAcquire(ctx, key, token, &acq)
			switch {
			case err == nil:
				s.served(ctx, entry, key, n, handed)
				return lock, false, true, nil
			case held.unqueued:
				return nil, false, false, nil // the queue was refused: left by the deferred leave
			case errors.Is(err, ErrNotLockValue):
				foreign = append(foreign, err)
			case errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrNotReplicated):
				if !held.takeableAt.IsZero() && (takeable.IsZero() || held.takeableAt.Before(takeable)) {
					takeable = held.takeableAt
				}
			default:
				if err := attemptFailed(ctx, key, err, &notReplicated); err != nil {
					if ctx.Err() != nil {
						return nil, false, true, s.notAcquired(n, foreign, errors.Join(ctx.Err(), notReplicated))
					}
					return nil, false, true, err
				}
				transient = true
			}
			if len(handed) > 0 {
				break // a handoff heard: act on it before the other permits
			}
		}
		if len(foreign) == n {
			return nil, false, true, s.notAcquired(n, foreign, nil) // nothing to wait for
		}
		if acq.wait == WaitNone {
			acq.wait = WaitPoll // until something wakes it
			l.observe(Event{Kind: EventWaiting, Key: entry.key, ExpiresAt: takeable, Attempts: acq.attempts})
		}
		wait := l.cfg.announcedPoll
		if transient {
			wait = min(wait, retry.next())
		}
		if !takeable.IsZero() {
			wait = min(wait, max(takeable.Sub(l.cfg.clock.Now()), 0))
		}
		if note, err = s.sleepInLine(ctx, wait, handed, sub); err != nil {
			if notReplicated != nil {
				err = errors.Join(err, notReplicated)
			}
			return nil, false, true, s.notAcquired(n, foreign, err)
		}
		switch {
		case note.handoff():
			acq.wait = WaitHandoff
		case note.key != "":
			acq.wait = WaitBarging // a permit left free for the first in line to race for
		default:
			acq.wait = WaitPoll
		}
	}
}

// lookInLine reads every permit (MGET) once the wait's first attempt has
// put its entry in line, so that the pass attempts only the permits an
// attempt could win: a release from then on hands its permit to the
// queue, and one before it left the permit free, which the look finds. worth[i]
// says permit i is missing, not a live lease by judge's rule, or carries
// the wait's token (handed to it): a value that is not a lock value (H7)
// is worth an attempt too, which reports it. It also returns the earliest
// end of the live leases it found, or takeable when that is earlier. worth
// is nil when the read failed: every permit is attempted.
func (s *Semaphore) lookInLine(ctx context.Context, n int, token string, takeable time.Time) (worth []bool, earliest time.Time) {
	l := s.locker
	keys := make([]string, n)
	for i := range keys {
		keys[i] = PermitKey(s.name, i)
	}
	values, err := l.client.MGet(ctx, keys...).Result()
	if err != nil || len(values) != n {
		return nil, takeable
	}
	earliest = takeable
	now := l.cfg.clock.Now()
	worth = make([]bool, n)
	for i, v := range values {
		value, isString := v.(string)
		if !isString || tokenOf(value) == token || !l.liveLease(value, now) {
			worth[i] = true
			continue
		}
		if _, at, err := l.takeableFrom(value); err == nil && (earliest.IsZero() || at.Before(earliest)) {
			earliest = at
		}
	}
	return worth, earliest
}

// sleepInLine waits for a note of the wait's entry, the timer, the
// subscription's end or ctx, whichever comes first.
func (s *Semaphore) sleepInLine(ctx context.Context, wait time.Duration, handed <-chan handoffNote, sub *subscription) (handoffNote, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return handoffNote{}, ctx.Err()
	case note := <-handed:
		return note, nil
	case <-timer.C:
	case <-sub.stopped:
	}
	return handoffNote{}, nil
}

// served ends a wait of n permits that holds the permit key: a handoff of
// another permit to its entry, heard already or still to come, is declined
// (handed on), and the permit it holds never is. A write of its attempts
// on another permit whose reply was lost (H5) carries its token too and
// would be nobody's lease: it is deleted, only while it is exactly that
// write.
func (s *Semaphore) served(ctx context.Context, entry *queueEntry, key string, n int, handed <-chan handoffNote) {
	l := s.locker
	now := l.cfg.clock.Now()
	l.handoff.abandonHolding(entry, key, now, now.Add(leaveTimeout))
	for {
		select {
		case note := <-handed:
			if note.handoff() && note.key != key {
				go l.leaveOnce(context.Background(), entry.at(note.key))
			}
			continue
		default:
		}
		break
	}
	for i := range n {
		if other := PermitKey(s.name, i); other != key {
			l.abandonLostWrites(ctx, other) // a round trip only for a write remembered
		}
	}
}

// decline is the protocol's leave of one permit for a wait that goes on
// waiting: it hands on (or deletes) the permit while it carries the
// entry's token. Unlike leaveOnce, a leave that fails does not abandon the
// entry: the wait still hears its handoffs, and none is declined for it
// (route), or the route's decline of a permit the wait then claims by its
// own attempt would hand on its lease (one owner per value). What a failed
// decline leaves is a value carrying the token on a permit past the wait's
// count, which the wait never takes: it costs the claim window, and a late
// copy of the leave (H10) hands on only such a value.
func (s *Semaphore) decline(ctx context.Context, entry *queueEntry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	_ = s.locker.onPath(func(p path) error { return p.queue().leave(ctx, entry) })
}

// leaveLine takes a wait that ends without a permit out of the queue: on
// each permit, the protocol's leave, which hands on (or deletes) a permit
// carrying the entry's token and wakes the next in line for a permit left
// free. A handoff written after it is declined (route).
func (s *Semaphore) leaveLine(ctx context.Context, entry *queueEntry, n int) {
	l := s.locker
	now := l.cfg.clock.Now()
	l.handoff.abandonHolding(entry, "", now, now.Add(leaveTimeout))
	for i := range n {
		key := PermitKey(s.name, i)
		l.leaveOnce(ctx, entry.at(key))
		l.abandonLostWrites(ctx, key)
	}
}
