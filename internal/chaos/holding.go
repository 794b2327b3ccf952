package chaos

import (
	"context"
	"errors"
	"time"

	"github.com/setnxlock/setnxlock"
)

// What a loop holds once its Acquire (or Campaign) returns, and how it gives
// it up: a Lock, or in an election run a Leadership.

// holding is what a loop holds: a Lock, or in an election run a
// Leadership, whose term is its fencing token.
type holding interface {
	FencingToken() int64
	ExpiresAt() time.Time
	Done() <-chan struct{}
	// release gives it up and names the outcome for the report.
	release(ctx context.Context) (outcome string, retry bool)
}

type heldLock struct{ *setnxlock.Lock }

func (h heldLock) release(ctx context.Context) (string, bool) {
	switch err := h.Release(ctx); {
	case err == nil:
		return OutcomeReleased, false
	case errors.Is(err, setnxlock.ErrNotHeld):
		return OutcomeNotHeld, false
	}
	return OutcomeError, true
}

type heldLeadership struct{ *setnxlock.Leadership }

func (h heldLeadership) FencingToken() int64 { return h.Term() }

// release resigns. Resign is nil once nothing of the leadership is left,
// lost or not; Err tells which.
func (h heldLeadership) release(ctx context.Context) (string, bool) {
	switch err := h.Resign(ctx); {
	case err != nil:
		return OutcomeError, true
	case h.Err() != nil:
		return OutcomeNotHeld, false
	}
	return OutcomeReleased, false
}
