package setnxlock

import (
	"context"
	"errors"
	"fmt"
)

// Lead is the service idiom of an election: it campaigns for name, runs fn
// under the leadership's context (Leadership.Context) once it leads, and
// resigns when fn returns. When the leadership is lost while fn runs,
// fn's context is cancelled (context.Cause matches ErrNotHeld) and, once
// fn has returned, Lead campaigns again; fn's error is then dropped, since
// it only answers the cancellation. Lead returns when fn returns while this
// candidate still leads, with fn's error (after resigning; a resign that
// fails is joined to it, and the lease then runs out on its own), or when
// ctx ends, with an error matching ErrNotAcquired and ctx.Err() if it was
// campaigning, or fn's error if fn was running (fn sees ctx end through its
// context, which is derived from ctx).
//
// fn runs only while the candidate leads, and two runs of fn in one Lead
// never overlap. Like any lease holder, fn must stop when its context is
// cancelled: after a loss another candidate leads (H8); pass
// Leadership.Term, which Lead gives fn through LeadershipFrom, with every
// write to fence a leader that stalled.
func (l *Locker) Lead(ctx context.Context, name, value string, fn func(ctx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function to lead with", ErrInvalidArgument)
	}
	for {
		lead, err := l.Campaign(ctx, name, value)
		if err != nil {
			return err
		}
		fnErr, lost, resignErr := l.leadWith(ctx, lead, fn)
		if lost == nil || ctx.Err() != nil {
			return errors.Join(fnErr, resignErr)
		}
		// Lost while fn ran: campaign again.
	}
}

// leadWith runs fn under the leadership and resigns when it returns, or
// panics: a panic that a caller recovers must not leave the leadership
// renewing itself for ever. lost is the leadership's Err as fn returned.
func (l *Locker) leadWith(ctx context.Context, lead *Leadership, fn func(ctx context.Context) error) (fnErr, lost, resignErr error) {
	defer func() {
		resign, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.ttl)
		resignErr = lead.Resign(resign)
		cancel()
	}()
	fnErr = fn(context.WithValue(lead.Context(ctx), leadershipKey{}, lead))
	return fnErr, lead.Err(), nil
}

// leadershipKey is the context key under which Lead passes fn its
// Leadership.
type leadershipKey struct{}

// LeadershipFrom returns the Leadership that Lead runs fn under, from fn's
// context, or nil for any other context.
func LeadershipFrom(ctx context.Context) *Leadership {
	lead, _ := ctx.Value(leadershipKey{}).(*Leadership)
	return lead
}
