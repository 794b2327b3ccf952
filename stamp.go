package setnxlock

import "time"

// The leases we write: a stamp is one value with the lease it states, made
// for an attempt in the Locker's format and TTL; the safety net (H6) is how
// long Redis keeps it.

// stamp is one value we write into a lock key: the value itself, the
// expiry it states, and when by our clock the lease it grants began.
type stamp struct {
	value  string
	expiry time.Time
	start  time.Time
}

// length is how long the lease lasts from its start: the TTL, plus what
// the format's rounding added. The server-side safety net (H6) is counted
// from it, so it never ends a lease the value still states is live.
func (s stamp) length() time.Duration { return s.expiry.Sub(s.start) }

// attemptStamp is a lease of the Locker's TTL beginning at now, in its format:
// carrying the token of entry for a queued attempt, else a fresh owner
// token where the format carries one.
func (l *Locker) attemptStamp(now time.Time, entry *queueEntry) stamp {
	token := ""
	switch {
	case entry != nil:
		token = entry.token
	case l.cfg.format.tokens():
		token = newToken()
	}
	return l.cfg.format.newStamp(now, l.cfg.ttl, token)
}

// safetyNet is how long Redis keeps a key whose lease ends in remaining:
// the lease, then the grace period (H6).
func (l *Locker) safetyNet(remaining time.Duration) time.Duration {
	if l.cfg.grace > 0 {
		return remaining + l.cfg.grace
	}
	return remaining + l.cfg.ttl
}
