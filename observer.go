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
)

var eventNames = map[EventKind]string{
	EventAcquired:  "acquired",
	EventContended: "contended",
	EventRecovered: "recovered",
	EventRefreshed: "refreshed",
	EventReleased:  "released",
	EventLost:      "lost",
}

// String returns the event's name, such as "acquired".
func (k EventKind) String() string {
	if name, ok := eventNames[k]; ok {
		return name
	}
	return "unknown"
}

// Event is one thing that happened to a lock.
type Event struct {
	Kind EventKind
	Key  string
	// ExpiresAt is the end of our lease, or for EventContended the instant
	// the other client's lease may be taken over.
	ExpiresAt    time.Time
	FencingToken int64 // 0 without WithFencing
	Err          error // why, for EventLost
}

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
		return nil
	}
}

// observe reports an event if the Locker has an Observer.
func (l *Locker) observe(e Event) {
	if l.cfg.observer != nil {
		l.cfg.observer.Observe(e)
	}
}

// NewSlogObserver returns an Observer that writes each event to logger:
// lost locks at Warn, takeovers of crashed holders at Info, everything
// else at Debug.
func NewSlogObserver(logger *slog.Logger) Observer {
	return ObserverFunc(func(e Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case EventLost:
			level = slog.LevelWarn
		case EventRecovered:
			level = slog.LevelInfo
		}
		attrs := []slog.Attr{slog.String("key", e.Key), slog.Time("expires_at", e.ExpiresAt)}
		if e.FencingToken != 0 {
			attrs = append(attrs, slog.Int64("fencing_token", e.FencingToken))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("err", e.Err.Error()))
		}
		logger.LogAttrs(context.Background(), level, "setnxlock: "+e.Kind.String(), attrs...)
	})
}
