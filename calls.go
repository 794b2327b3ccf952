package setnxlock

import (
	"context"
)

// Tracing calls: an Observer hears events, which carry no context. One
// that also implements CallObserver hears each Acquire, TryAcquire and
// Release begin and end on the caller's goroutine, with the caller's
// context, so that it can open a span there: a lock wait then shows up
// inside the trace of the request that caused it. The interface is
// optional, so an Observer that only counts pays nothing for it, and a
// Locker without an Observer pays one nil check per call.

// Call names a call a CallObserver hears.
type Call int

// The calls a CallObserver hears.
const (
	CallAcquire Call = iota + 1
	CallTryAcquire
	CallRelease
)

var callNames = [...]string{"", "acquire", "try_acquire", "release"}

// String returns the call's name, such as "acquire".
func (c Call) String() string {
	if c == 0 {
		return "unknown"
	}
	return nameIn(callNames[:], int(c))
}

// CallResult is how a call a CallObserver heard ended.
type CallResult struct {
	// Event is, for Acquire and TryAcquire, the event that reported the
	// win (EventAcquired, EventRecovered) or Acquire's failure
	// (EventAcquireFailed); for Release, the lock's end (EventReleased,
	// EventLost) when this call ended it. Its Kind is 0 otherwise (a
	// TryAcquire refused, a Release that failed in transit).
	Event Event
	// Err is the call's error.
	Err error
}

// CallObserver is an Observer that also hears calls begin and end. Give
// it to WithObserver like any Observer.
type CallObserver interface {
	Observer
	// BeginCall is called as call starts on key, on the caller's
	// goroutine, with the caller's context. The call runs in the context
	// BeginCall returns (a span there is the parent of the Redis
	// commands' own spans), and calls end exactly once, as it returns.
	// The events the call causes are observed between the two.
	BeginCall(ctx context.Context, call Call, key string) (context.Context, func(CallResult))
}

// beginCall starts call on key for the Locker's CallObserver, if it has
// one; end is nil otherwise, and ctx unchanged.
func (l *Locker) beginCall(ctx context.Context, call Call, key string) (context.Context, func(CallResult)) {
	if l.cfg.calls == nil {
		return ctx, nil
	}
	return l.cfg.calls.BeginCall(ctx, call, key)
}
