package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A Lock talks to Redis one call at a time: its turn (Lock.op) guards the
// values it wrote. While the lock is held, no call waits past the end of
// the lease (H11): a lease is over when it says it is, whatever is in
// flight.

// lockOp waits for the lock's turn to talk to Redis, or for ctx to end.
func (k *Lock) lockOp(ctx context.Context, verb string) error {
	select {
	case k.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("setnxlock: %s %q: %w", verb, k.key, ctx.Err())
	}
}

func (k *Lock) unlockOp() { <-k.op }

// inTurn runs body, which talks to Redis, in the Lock's turn, and returns
// its error. While the lock is held, neither the wait for the turn nor the
// body's round trips outlast the lease (H11): when the lease ends by the
// Locker's clock first, the lock is lost at that instant (Done, Err,
// Context say so) and inTurn returns overdue(nil) at once. go-redis ends a
// round trip at ctx's deadline only on a client with ContextTimeoutEnabled;
// on any other it waits for its ReadTimeout and retries, seconds past a
// short lease. The body then goes on in the background, holding the turn
// until its round trip returns, and believes nothing it hears: lease.move
// refuses to extend a life that has ended. A body that fails once the
// lease has run out returns overdue(its error). Once the lock is over (a
// courtesy Release of a lost lock), only ctx bounds the wait.
func (k *Lock) inTurn(ctx context.Context, verb string, body func() error, overdue func(err error) error) error {
	bounded := !k.endIfRunOut() // a lease already over is lost now, not after a round trip
	returned := make(chan struct{})
	defer close(returned) // drops the waits for the lease's end
	leaseEnd := func() <-chan time.Time { return k.leaseEnd(bounded, returned) }
	for taken := false; !taken; {
		select {
		case k.op <- struct{}{}:
			taken = true
		case <-ctx.Done():
			return fmt.Errorf("setnxlock: %s %q: %w", verb, k.key, ctx.Err())
		case <-leaseEnd():
			if k.endIfRunOut() {
				return overdue(nil)
			}
		}
	}
	result := make(chan error, 1)
	go func() {
		defer k.unlockOp()
		result <- body()
	}()
	for {
		select {
		case err := <-result:
			if err != nil && !errors.Is(err, ErrNotHeld) && bounded && k.endIfRunOut() {
				return overdue(err)
			}
			return err
		case <-leaseEnd():
			if k.endIfRunOut() {
				select {
				case err := <-result: // answered at the same instant: its own word
					return err
				default:
					return overdue(nil)
				}
			}
		}
	}
}

// lostWith is inTurn's overdue for calls whose answer is the lease itself
// (Refresh, a renewal): the loss, and what the round trip said, if
// anything.
func (k *Lock) lostWith(verb string) func(err error) error {
	return func(err error) error {
		if err == nil {
			return k.Err()
		}
		return fmt.Errorf("%w (%s: %w)", k.Err(), verb, err)
	}
}

// leaseEnd fills the returned channel when the lease's current end comes
// by the Locker's clock, unless abandon is closed first; it is nil (never
// ready) when bounded is false. Whoever receives from it checks the lease
// again: a renewal may have moved its end meanwhile.
func (k *Lock) leaseEnd(bounded bool, abandon <-chan struct{}) <-chan time.Time {
	if !bounded {
		return nil
	}
	return at(k.locker.cfg.clock, k.ExpiresAt(), abandon)
}
