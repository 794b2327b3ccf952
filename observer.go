package setnxlock

import (
	"context"
	"log/slog"
	"time"
)

// EventKind names what happened to a lock.
type EventKind int

// The events a Locker reports to its Observer.
const (
	// EventAcquired: SETNX won a free key.
	EventAcquired EventKind = iota + 1
	// EventContended: an attempt was refused by another client's live
	// lease; ExpiresAt is when that lease may be taken over.
	EventContended
	// EventRecovered: an expired lease was taken over with GETSET.
	EventRecovered
	// EventRefreshed: our lease was moved forward.
	EventRefreshed
	// EventReleased: the lock was given up with Release.
	EventReleased
	// EventLost: the lock was lost; Err says why (it matches ErrNotHeld).
	EventLost
	// EventWaiting: an Acquire's attempt found the key held (or failed on
	// a transient error) and the call starts waiting; ExpiresAt is when
	// the holder's lease may be taken over, zero if unknown. It is
	// reported once per call, and the call ends with exactly one
	// EventAcquired, EventRecovered or EventAcquireFailed whose Wait is
	// not WaitNone; a call that never waited reports no EventWaiting and
	// ends with WaitNone.
	EventWaiting
	// EventAcquireFailed: an Acquire returned without the lock; Outcome
	// says how (OutcomeTimeout, OutcomeCanceled, OutcomeError) and Err
	// why. TryAcquire reports a live holder as EventContended instead, and
	// its other failures as nothing.
	EventAcquireFailed
	// EventRefreshFailed: a Refresh, or a renewal of WithAutoRefresh,
	// returned an error; Err says why. A refusal also ends the lock
	// (EventLost); a network error may be retried.
	EventRefreshFailed
)

var eventNames = map[EventKind]string{
	EventAcquired:  "acquired",
	EventContended: "contended",
	EventRecovered: "recovered",
	EventRefreshed: "refreshed",
	EventReleased:  "released",
	EventLost:      "lost",

	EventWaiting:       "waiting",
	EventAcquireFailed: "acquire_failed",
	EventRefreshFailed: "refresh_failed",
}

// String returns the event's name, such as "acquired".
func (k EventKind) String() string {
	if name, ok := eventNames[k]; ok {
		return name
	}
	return "unknown"
}

// Event is one thing that happened to a lock. Durations are measured by
// the Locker's clock (WithClock).
type Event struct {
	Kind EventKind
	Key  string
	// ExpiresAt is the end of our lease, or for EventContended the instant
	// the other client's lease may be taken over.
	ExpiresAt    time.Time
	FencingToken int64 // 0 without WithFencing
	Err          error // why, for EventLost, EventAcquireFailed and EventRefreshFailed

	// Waited is how long the call that took the lock (EventAcquired,
	// EventRecovered) or gave up (EventAcquireFailed) ran: from the start
	// of Acquire or TryAcquire to the win, or to the failure.
	Waited time.Duration
	// Attempts is how many attempts that call made, the winning one
	// included; a lock handed over (WaitHandoff) counts the attempts made
	// before the handoff came.
	Attempts int
	// Wait is how an Acquire that waited was served (EventAcquired,
	// EventRecovered), or how it was waiting when it gave up
	// (EventAcquireFailed); WaitNone when it never waited (TryAcquire, or
	// an Acquire whose first attempt won).
	Wait WaitKind
	// Outcome is how the call ended: OutcomeAcquired for EventAcquired and
	// EventRecovered, the failure's for EventAcquireFailed; OutcomeNone for
	// the other events.
	Outcome Outcome
	// Path is the path the Locker was on (scripts, commands or classic),
	// for EventAcquired, EventRecovered and EventReleased.
	Path PathKind
	// Held is how long the lock was held, for EventReleased and EventLost:
	// from the win to the release, or to the instant the lease ended.
	Held time.Duration
}

// WaitKind is how a waiting Acquire was served (Event.Wait).
type WaitKind int

// The ways a wait is served.
const (
	// WaitNone: it never waited.
	WaitNone WaitKind = iota
	// WaitHandoff: a release handed it the key (the queue; heard.go). A
	// key handed over that the wait's own poll claimed before the message
	// arrived reports WaitPoll: Wait is what woke the winning attempt.
	WaitHandoff
	// WaitBarging: a release freed the key and woke it, first in line, to
	// race for it (adaptive barging, WithStarvationThreshold).
	WaitBarging
	// WaitWakeUp: a release announced on the key's channel woke it.
	WaitWakeUp
	// WaitPoll: its own timer: backoff, or the holder's lease's end.
	WaitPoll
	// WaitTakeover: it took over a lease that ran out while it waited: the
	// holder crashed, or stalled past its lease.
	WaitTakeover
)

var waitNames = [...]string{"none", "handoff", "barging", "wakeup", "poll", "takeover"}

// String returns the way's name, such as "handoff".
func (w WaitKind) String() string { return nameIn(waitNames[:], int(w)) }

// Outcome is how an Acquire or a TryAcquire ended (Event.Outcome).
type Outcome int

// The outcomes of an acquisition.
const (
	OutcomeNone     Outcome = iota // not an acquisition's event
	OutcomeAcquired                // it took the lock
	OutcomeTimeout                 // its context's deadline passed first
	OutcomeCanceled                // its context was cancelled first
	OutcomeError                   // it failed: a foreign value (H7), bad input, a closed client, ...
)

var outcomeNames = [...]string{"none", "acquired", "timeout", "canceled", "error"}

// String returns the outcome's name, such as "timeout".
func (o Outcome) String() string { return nameIn(outcomeNames[:], int(o)) }

// PathKind names the path a Locker was on (path.go): its scripts, the
// commands with SET NX PX, or the classic commands alone.
type PathKind int

// The paths.
const (
	PathNone     PathKind = iota // not reported for this event
	PathScripts                  // one script per attempt and per release
	PathCommands                 // SET NX PX, GET and watched transactions (WithoutScripts, or scripts refused)
	PathClassic                  // SETNX and PEXPIRE (WithClassicCommands, or a server without SET's options)
)

var pathNames = [...]string{"none", "scripts", "commands", "classic"}

// String returns the path's name, such as "scripts".
func (p PathKind) String() string { return nameIn(pathNames[:], int(p)) }

// Observer receives a Locker's events, for metrics, tracing or logs. It is
// called synchronously on the goroutine that caused the event, so it must
// be quick and must not call back into the Lock. A lock's end
// (EventReleased, EventLost) is observed before its Done channel closes,
// so a Release or Refresh that reports the end returns after it.
type Observer interface {
	Observe(Event)
}

// ObserverFunc lets a plain function be an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// WithObserver makes the Locker report every lock's events to o.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if o == nil {
			return errNilObserver
		}
		c.observer = o
		c.calls, _ = o.(CallObserver)
		return nil
	}
}

// observe reports an event if the Locker has an Observer.
func (l *Locker) observe(e Event) {
	if l.cfg.observer != nil {
		l.cfg.observer.Observe(e)
	}
}

// nameIn is names[i], or "unknown" for an i out of its range.
func nameIn(names []string, i int) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return "unknown"
}

// pathKind is the path the Locker is on now: the one onPath takes.
func (l *Locker) pathKind() PathKind {
	switch {
	case l.caps.allows(capScripts):
		return PathScripts
	case l.caps.allows(capSetNXPX):
		return PathCommands
	}
	return PathClassic
}

// NewSlogObserver returns an Observer that writes each event to logger:
// lost locks at Warn, takeovers of crashed holders and failed Acquire
// calls at Info, everything else at Debug.
func NewSlogObserver(logger *slog.Logger) Observer {
	return ObserverFunc(func(e Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case EventLost:
			level = slog.LevelWarn
		case EventRecovered, EventAcquireFailed:
			level = slog.LevelInfo
		}
		attrs := []slog.Attr{slog.String("key", e.Key), slog.Time("expires_at", e.ExpiresAt)}
		if e.FencingToken != 0 {
			attrs = append(attrs, slog.Int64("fencing_token", e.FencingToken))
		}
		if e.Outcome != OutcomeNone {
			attrs = append(attrs, slog.String("outcome", e.Outcome.String()), slog.Duration("waited", e.Waited),
				slog.Int("attempts", e.Attempts), slog.String("wait", e.Wait.String()))
		}
		if e.Kind == EventReleased || e.Kind == EventLost {
			attrs = append(attrs, slog.Duration("held", e.Held))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("err", e.Err.Error()))
		}
		logger.LogAttrs(context.Background(), level, "setnxlock: "+e.Kind.String(), attrs...)
	})
}
