package setnxlock

import (
	"sync"
	"time"
)

// pendingWrites remembers SETNX values whose reply was lost (H5): the server
// may have applied the command after all. A later attempt that finds one of
// these values at its key owns the lock, because SETNX wrote it only when the
// key was free and nobody else knows the random token. Only SETNX values are
// remembered: a lost GETSET reply hides whether we won the takeover, so its
// value can never be claimed.
type pendingWrites struct {
	mu    sync.Mutex
	byKey map[string][]pendingWrite
}

// pendingWrite is one SETNX whose outcome is unknown.
type pendingWrite struct {
	value  string
	expiry time.Time
}

// remember records a SETNX of value on key whose reply was lost. Entries
// whose lease is over at now are dropped at the same time, so the map holds
// only writes that could still be claimed.
func (p *pendingWrites) remember(key, value string, expiry, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byKey == nil {
		p.byKey = make(map[string][]pendingWrite)
	}
	for k, writes := range p.byKey {
		if live := unexpired(writes, now); len(live) > 0 {
			p.byKey[k] = live
		} else {
			delete(p.byKey, k)
		}
	}
	p.byKey[key] = append(p.byKey[key], pendingWrite{value: value, expiry: expiry})
}

// claim reports whether current is a remembered write on key whose lease is
// still live at now, and forgets the key's remembered writes if so.
func (p *pendingWrites) claim(key, current string, now time.Time) (pendingWrite, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, write := range p.byKey[key] {
		if write.value == current && !expired(write.expiry, now) {
			delete(p.byKey, key)
			return write, true
		}
	}
	return pendingWrite{}, false
}

func unexpired(writes []pendingWrite, now time.Time) []pendingWrite {
	live := writes[:0]
	for _, w := range writes {
		if !expired(w.expiry, now) {
			live = append(live, w)
		}
	}
	return live
}
