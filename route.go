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
	key     string // the key handed, or left free
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
	// A semaphore's wait that won a permit (semwait.go): its entry may
	// have been handed other permits, each of them declined until the
	// mark expires, but never held, the permit it keeps, whose value
	// carries the entry's token too (one owner per value).
	held string
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
	note := handoffNote{key: key, end: end, heardAt: l.cfg.clock.Now()}
	h.mu.Lock()
	signal := h.expected[token]
	gone, isAbandoned := h.abandoned[token]
	shared := isAbandoned && l.sharesQueue(gone.entry.key)
	if isAbandoned && !shared {
		delete(h.abandoned, token) // a lock's entry is handed at most once more
	}
	h.mu.Unlock()
	switch {
	case signal != nil:
		notify(signal, note)
	case isAbandoned && key != gone.held && (key == gone.entry.key || shared && l.waitersOf(key) == l.waitersOf(gone.entry.key)):
		// Declined: handed on in the background, so that the handoffs to
		// this Locker's other waits are not held up behind its round
		// trips (each bounded by leaveTimeout). It may race the wait's own
		// leave: each hands on only a value carrying the entry's token,
		// atomically, so the second finds nothing to do. A semaphore's
		// entry may be handed any of its permits, and more than one
		// (semwait.go): each is declined, but never the one it holds.
		go l.leaveOnce(context.Background(), gone.entry.at(key))
	}
}

// expect registers the token of a wait's entry before the entry is pushed,
// so that no handoff to it goes unheard; forget ends that.
func (h *handoffs) expect(token string) <-chan handoffNote { return h.expectMany(token, 1) }

// expectMany is expect for an entry that may be handed up to n keys (a
// semaphore's, semwait.go): up to n notes wait, so that no handoff
// replaces another.
func (h *handoffs) expectMany(token string, n int) <-chan handoffNote {
	signal := make(chan handoffNote, n)
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
	h.abandonHolding(entry, "", now, until)
}

// abandonHolding is abandon for a wait that holds the key held (a
// semaphore's permit, semwait.go), or none (""): a handoff of held to the
// entry is never declined, since the wait's own lease carries the entry's
// token too (one owner per value). Once set, held stays with the token:
// a later abandon of the same entry (a decline that failed) keeps it.
func (h *handoffs) abandonHolding(entry *queueEntry, held string, now, until time.Time) {
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
	a, ok := h.abandoned[entry.token]
	if ok && a.held != "" {
		held = a.held
	}
	if !ok || a.until.Before(until) {
		a.entry, a.until = entry, until
	}
	a.held = held
	h.abandoned[entry.token] = a
}
