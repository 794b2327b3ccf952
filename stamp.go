package setnxlock

import "time"

// The leases we write: a stamp is one value with the lease it states, made
// for an attempt in the Locker's format and TTL; the safety net (H6) is how
// long Redis keeps it.

// stamp is one value we write into a lock key: the value itself, the
// expiry it states, and when by our clock the lease it grants began. A
// stamp that an attempt of a queued wait writes or claims names that
// wait by its entry's token (protocol.go), which is all the attempt knows
// of the queue.
type stamp struct {
	value      string
	expiry     time.Time
	start      time.Time
	queuedWait string // the token of the queued wait whose attempt writes or claims it; "" outside the queue
}

// carriesWait reports whether the value carries its queued wait's token,
// and so belongs to that wait alone (one owner per value, protocol.go). An
// attempt of the wait that could not queue writes a token of its own (X2),
// and one that claims a remembered write (H5) claims a token of its own.
func (s stamp) carriesWait() bool { return s.queuedWait != "" && tokenOf(s.value) == s.queuedWait }

// length is how long the lease lasts from its start: the TTL, plus what
// the format's rounding added. The server-side safety net (H6) is counted
// from it, so it never ends a lease the value still states is live.
func (s stamp) length() time.Duration { return s.expiry.Sub(s.start) }

// attemptStamp is a lease of the Locker's TTL beginning at now, in its
// format, for an attempt of the queued wait whose token is queuedWait:
// carrying that token, or outside the queue ("") a fresh owner token where
// the format carries one.
func (l *Locker) attemptStamp(now time.Time, queuedWait string) stamp {
	token := queuedWait
	if token == "" && l.cfg.format.tokens() {
		token = newToken()
	}
	ours := l.newStamp(now, l.cfg.ttl, token)
	ours.queuedWait = queuedWait
	return ours
}

// newStamp is a lease of length ttl beginning at now, in the Locker's
// format, carrying token and, where the format writes one, the Locker's
// identity.
func (l *Locker) newStamp(now time.Time, ttl time.Duration, token string) stamp {
	return l.cfg.format.newStamp(now, ttl, token, l.cfg.identity)
}

// safetyNet is how long Redis keeps a key whose lease ends in remaining:
// the lease, then the grace period (H6).
func (l *Locker) safetyNet(remaining time.Duration) time.Duration {
	if l.cfg.grace > 0 {
		return remaining + l.cfg.grace
	}
	return remaining + l.cfg.ttl
}
