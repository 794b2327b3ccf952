package setnxlock

import (
	"context"
	"errors"
	"fmt"
)

// Heard is a provisional hold; only a claim makes it a lease (protocol.go).
// A waiter handed a key holds it from the moment it hears the handoff:
// Acquire returns at once with a Lock on the provisional value, and the
// claim goes out at once in the background, in the Lock's turn (turn.go),
// taken before Acquire returns, so that Release and Refresh queue behind
// it. Until the claim is confirmed, the lease ends at the provisional
// value's stated end less the skew margin, by the waiter's own clock, and
// never later than its receipt plus the claim window (the holder's clock
// bounds its lease), less the clock's uncertainty (ourLeaseEnd). The
// server keeps the provisional value past its stated end (provisionalNet,
// H6), and a foreign reader takes it over only the skew margin after that
// end (H4), so the hold ends, for the waiter, before anyone else may act.
//
// The confirmed claim moves the lease to the claim's own (lease.move). A
// claim that fails (the key no longer carries the provisional value, an
// error, no reply by the provisional end) ends the Lock as lost: Done
// closes and Err matches ErrNotHeld, no later than the provisional end
// (inTakenTurn, H11). The Lock owns both values, the provisional one and
// its claim, by the wait's token (one owner per value), so a Release or a
// Refresh after a lost reply still recognises its key.

// holdHeard returns a Lock on key, handed to the wait of entry as note
// says, before its claim is confirmed; or nil when the wait must claim
// the key before it holds it: note is not a handoff, the provisional hold
// is already over by our clock (a late message), or the Locker needs the
// claim's own write acknowledged first (WithReplicas, H9).
func (l *Locker) holdHeard(key string, entry *queueEntry, note handoffNote, acq *acquireCall) *Lock {
	if !note.handoff() || l.cfg.replicas > 0 || l.cfg.fencing {
		return nil
	}
	value := note.end + string(tokenSeparator) + entry.token // the provisional value, exactly as written
	stated, err := parseExpiry(value)
	if err != nil {
		return nil
	}
	now := l.cfg.clock.Now()
	bound := earliest(stated.Add(-l.cfg.skewMargin), note.heardAt.Add(claimWindow))
	ends := l.ourLeaseEnd(bound, now)
	if expired(ends, now) {
		return nil
	}
	lock := l.newLock(key, note.heardAt, ends, now)
	lock.token, lock.value = entry.token, value
	lock.op <- struct{}{} // bounded: a new Lock's turn is free; the claim's, before anyone else may ask
	ours := l.attemptStamp(now, entry.token)
	acq.wait = WaitHandoff
	l.announceWin(Event{Kind: EventAcquired, Key: key, ExpiresAt: ends}, now, acq) // before the claim can announce a loss
	go lock.claimHeard(ours, entry)
	if l.cfg.autoRefresh {
		lock.startKeeper()
	}
	return lock
}

// claimHeard claims the key of a Lock held on a handoff heard, in the
// turn holdHeard took for it, bounded by the provisional lease (H11): the
// Lock is lost at its end by the Locker's clock, and the claim's context
// ends then (a client with ContextTimeoutEnabled stops waiting; none
// sends it again).
func (k *Lock) claimHeard(ours stamp, entry *queueEntry) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-k.lease.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	_ = k.inTakenTurn(func() error { return k.claim(ctx, ours, entry) }, k.lostWith("claim"))
}

// claim is claimHeard's round trip, in the Lock's turn.
func (k *Lock) claim(ctx context.Context, ours stamp, entry *queueEntry) error {
	l := k.locker
	ours, claimed, err := l.claimHandoff(ctx, k.key, ours, entry)
	if err != nil {
		err = k.finish(lost, fmt.Errorf("%w: the claim of %q, handed to us: %w", ErrNotHeld, k.key, err))
		k.giveBack(ctx) // the claim may have been applied: a value nobody holds must not outlive the provisional window
		return err
	}
	if !claimed {
		return k.finish(lost, fmt.Errorf("%w: %q no longer holds the value handed to us", ErrNotHeld, k.key))
	}
	k.value = ours.value
	if !k.lease.move(ours.start, l.ourLeaseEnd(ours.expiry, l.cfg.clock.Now())) {
		// H11: the provisional hold ran out before the claim was confirmed,
		// and the Lock was lost then. Nobody will use the claimed lease.
		k.giveBack(ctx)
		return k.Err()
	}
	return nil
}

// giveBack releases, bounded whatever ctx says, the key of a Lock whose
// life has ended while it may still carry our token: handed on to the
// next in line, or deleted. The caller holds the Lock's turn.
func (k *Lock) giveBack(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	_, _ = k.locker.deleteIfOwned(ctx, k)
}

// claimHandoff claims, on the Locker's path, the key handed to entry's
// wait (queueTransport.claim), and returns the lease it wrote. Finding our
// claim's own value is a claim made: go-redis resent it after a reply was
// lost, and the first copy was applied. Finding a value of the wait that
// states an end no earlier than ours, it claims again once with a value a
// millisecond past that end (restamp), so the claim moves the lease
// forward and never writes the value it found (H10).
//
// A claim that failed in transit (H5) is sent again, up to maxClaims in
// all while ctx lasts: it finds its own value if the first copy was
// applied.
func (l *Locker) claimHandoff(ctx context.Context, key string, ours stamp, entry *queueEntry) (stamp, bool, error) {
	restamped := false
	for range maxClaims {
		var claimed bool
		var current string
		err := l.onPath(func(p path) (err error) {
			claimed, current, err = p.queue().claim(ctx, key, ours, entry)
			return err
		})
		switch {
		case err != nil && ctx.Err() == nil && retryable(err) && !errors.Is(err, ErrNotAcquired):
			continue
		case err != nil:
			return ours, false, err
		case claimed || current == ours.value:
			return ours, true, nil
		case !entry.carries(current):
			return ours, false, nil
		}
		if restamped {
			return ours, false, nil // the key keeps moving: not ours to hold
		}
		if ours, err = restamp(current, ours); err != nil {
			return ours, false, fmt.Errorf("setnxlock: key %q: %w", key, err)
		}
		restamped = true
	}
	return ours, false, fmt.Errorf("setnxlock: the claim of %q failed %d times", key, maxClaims)
}

// maxClaims bounds how often a heard wait sends its claim: once, again
// after a failure in transit, and once restamped.
const maxClaims = 3
