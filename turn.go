package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A Lock talks to Redis one call at a time: its turn (Lock.op) guards the
// values it wrote. While the lock is held, no call waits past the end of
// the lease (H11): a lease is over when it says it is, whatever is in
// flight.

// errTurnOverdue is takeTurn's answer when the lock's life ended while it
// waited for the turn.
var errTurnOverdue = errors.New("setnxlock: the lock ended before its turn")

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
// courtesy Release of a lost lock) inTurn takes the turn only if it is
// free, and returns overdue(nil) otherwise.
func (k *Lock) inTurn(ctx context.Context, verb string, body func() error, overdue func(err error) error) error {
	bounded := !k.endIfRunOut() // a lease already over is lost now, not after a round trip
	if !bounded {
		// The lock is over: a body the lease's end left in flight may hold
		// the turn for as long as go-redis waits, and the lock's end is the
		// answer to give meanwhile.
		select {
		case k.op <- struct{}{}:
		default:
			return overdue(nil)
		}
		return k.runInTurn(body)
	}
	if err := k.takeTurn(ctx, verb); errors.Is(err, errTurnOverdue) {
		return overdue(nil)
	} else if err != nil {
		return err
	}
	return k.inTakenTurn(body, overdue)
}

// takeTurn waits for the Lock's turn, no later than the lease's end by the
// Locker's clock (H11): it returns errTurnOverdue when the lock is over
// first, ctx's error when ctx ends first.
func (k *Lock) takeTurn(ctx context.Context, verb string) error {
	select {
	case k.op <- struct{}{}: // free, the common case: no wait for the lease's end to set up
		return nil
	default:
	}
	returned := make(chan struct{})
	defer close(returned) // drops the waits for the lease's end
	for {
		select {
		case k.op <- struct{}{}:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("setnxlock: %s %q: %w", verb, k.key, ctx.Err())
		case <-k.lease.done: // released or lost while we waited, its end moved earlier perhaps
			return errTurnOverdue
		case <-k.leaseEnd(returned):
			k.endIfRunOut() // ends the life if the end has come: lease.done says so
		}
	}
}

// inTakenTurn runs body, in the turn the caller took, bounded by the
// lease as inTurn says; the turn is given back when body returns, which
// may be after inTakenTurn did.
func (k *Lock) inTakenTurn(body func() error, overdue func(err error) error) error {
	returned := make(chan struct{})
	defer close(returned) // drops the waits for the lease's end
	result := turnResults.Get().(chan error)
	go func() { result <- k.runInTurn(body) }()
	// heard reads the body's answer, after which nothing writes to result:
	// it goes back to turnResults. A result inTakenTurn returns without
	// reading is left to the body, and to the collector.
	heard := func(err error) error {
		turnResults.Put(result)
		return err
	}
	// answer is the body's word, unless it failed once the lease had run
	// out by the clock, whoever declared that (this call, or the keeper
	// watching the same end): then it is the loss, with the body's error.
	answer := func(err error) error {
		if err != nil && !errors.Is(err, ErrNotHeld) {
			k.endIfRunOut()
			if errors.As(k.Err(), new(ranOut)) {
				return overdue(err)
			}
		}
		return err
	}
	for {
		select {
		case err := <-result:
			return answer(heard(err))
		case <-k.lease.done:
			if over := k.Err(); over == nil || !errors.As(over, new(ranOut)) {
				// Only a body in the Lock's turn ends its life other than by
				// the clock (finish), and we hold the turn: our own body
				// released the lock or found it lost, and returns at once.
				// Its answer, and the turn, are on their way: a call made
				// right after this one finds the turn free.
				return heard(<-result) // bounded: the body is past its round trip
			}
			select {
			case err := <-result: // answered at the same instant
				return answer(heard(err))
			default:
				return overdue(nil)
			}
		case <-k.leaseEnd(returned):
			k.endIfRunOut()
		}
	}
}

// turnResults holds the channels, each with room for one error, that
// carry a body's answer back to inTakenTurn, empty and free for the next
// call: the common path allocates none.
var turnResults = sync.Pool{New: func() any { return make(chan error, 1) }}

// runInTurn runs body in the turn the caller took, and gives the turn
// back when body returns.
func (k *Lock) runInTurn(body func() error) error {
	defer k.unlockOp()
	return body()
}

// lostWith is inTurn's overdue for the calls of a held lock: the lock's
// end (the loss, or the Release that came first), with what the round
// trip said, if anything.
func (k *Lock) lostWith(verb string) func(err error) error {
	return func(err error) error {
		over := k.Err()
		if over == nil {
			over = fmt.Errorf("%w: %q was released", ErrNotHeld, k.key)
		}
		if err == nil {
			return over
		}
		return fmt.Errorf("%w (%s: %w)", over, verb, err)
	}
}

// leaseEnd fills the returned channel when the lease's current end comes
// by the Locker's clock, unless abandon is closed first. Whoever receives
// from it checks the lease again: a renewal may have moved its end
// meanwhile.
func (k *Lock) leaseEnd(abandon <-chan struct{}) <-chan time.Time {
	return at(k.locker.cfg.clock, k.ExpiresAt(), abandon)
}
