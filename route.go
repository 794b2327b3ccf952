package setnxlock

import (
	"context"
	"time"
)

// Routing what a Locker hears on its handoff channel (handoff.go) to the
// waits it names, by the token of their queue entry.

// handoffNote is what a wait heard on its Locker's channel (formatPayload):
// a handoff, with the end its provisional value states as written, or,
// with no end, a wake-up to race for a key left free; and when it arrived
// by the Locker's clock, from which the waiter bounds a provisional hold
// (heard.go).
type handoffNote struct {
	end     string
	heardAt time.Time
}

// handoff reports whether the note hands the wait the key.
func (n handoffNote) handoff() bool { return n.end != "" }

// notify leaves note for the wait of signal. Only one note waits: a later
// one replaces a pending one, so a handoff is never lost behind a wake-up
// that came before it (the wait answers both with one attempt, and the
// handoff says more). Only the subscription's one dispatching goroutine
// sends (listen), so the replacement cannot race another send.
func notify(signal chan handoffNote, note handoffNote) {
	for {
		select {
		case signal <- note:
			return
		default:
		}
		select {
		case pending := <-signal:
			if pending.handoff() && !note.handoff() {
				note = pending // a wake-up says nothing a pending handoff does not
			}
		default:
		}
	}
}

// abandonedEntry is a queue entry whose wait has left, or failed to leave,
// the queue: a handoff to it is declined, until it expires (abandon).
type abandonedEntry struct {
	entry *queueEntry
	until time.Time
}

// route wakes the wait whose entry's token a handoff names
// (parsePayload). A handoff to an abandoned entry is declined at once:
// the key is handed on. One to a wait that has ended otherwise is dropped:
// that wait won the key (and must keep it), or left the queue after this
// handoff and handed the key on itself.
func (h *handoffs) route(l *Locker, payload string) {
	token, end, key, ok := parsePayload(payload)
	if !ok {
		return
	}
	note := handoffNote{end: end, heardAt: l.cfg.clock.Now()}
	h.mu.Lock()
	signal := h.expected[token]
	gone, isAbandoned := h.abandoned[token]
	if isAbandoned {
		delete(h.abandoned, token)
	}
	h.mu.Unlock()
	switch {
	case signal != nil:
		notify(signal, note)
	case isAbandoned && gone.entry.key == key:
		// Declined: handed on in the background, so that the handoffs to
		// this Locker's other waits are not held up behind its round
		// trips (each bounded by leaveTimeout). It may race the wait's own
		// leave: each hands on only a value carrying the entry's token,
		// atomically, so the second finds nothing to do.
		go l.leaveOnce(context.Background(), gone.entry)
	}
}

// expect registers the token of a wait's entry before the entry is pushed,
// so that no handoff to it goes unheard; forget ends that.
func (h *handoffs) expect(token string) <-chan handoffNote {
	signal := make(chan handoffNote, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.expected == nil {
		h.expected = make(map[string]chan handoffNote)
	}
	h.expected[token] = signal
	return signal
}

func (h *handoffs) forget(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.expected, token)
}

// abandon remembers, until it expires, an entry whose wait has ended at
// now, so that a handoff to it is declined (route), and forgets its
// signal. Expired entries are swept at most once every leaveTimeout, so
// that many waits ending at once cost no more than their own entries.
func (h *handoffs) abandon(entry *queueEntry, now, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.expected, entry.token)
	if h.abandoned == nil {
		h.abandoned = make(map[string]abandonedEntry)
	}
	if !now.Before(h.nextSweep) {
		for token, a := range h.abandoned {
			if !a.until.After(now) {
				delete(h.abandoned, token)
			}
		}
		h.nextSweep = now.Add(leaveTimeout)
	}
	if a, ok := h.abandoned[entry.token]; !ok || a.until.Before(until) {
		h.abandoned[entry.token] = abandonedEntry{entry: entry, until: until}
	}
}
