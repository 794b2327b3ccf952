package setnxlock

import (
	"context"
	"sync"
	"time"
)

// pendingWrites remembers values whose write lost its reply (H5): the server
// may have applied it after all. A later attempt that finds one of these
// values at its key owns the lock, because each write could only apply when
// the lock was rightfully ours (SETNX on a free key, or the watched takeover
// of the expired value we read, given a server that honours WATCH) and
// nobody else knows the random token.
type pendingWrites struct {
	mu    sync.Mutex
	byKey map[string][]stamp
}

// remember records a write of value on key whose reply was lost. Entries
// whose lease is over at now are dropped at the same time, so the map holds
// only writes that could still be claimed.
func (p *pendingWrites) remember(key string, write stamp, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byKey == nil {
		p.byKey = make(map[string][]stamp)
	}
	for k, writes := range p.byKey {
		if live := unexpired(writes, now); len(live) > 0 {
			p.byKey[k] = live
		} else {
			delete(p.byKey, k)
		}
	}
	p.byKey[key] = append(p.byKey[key], write)
}

// take reports whether current is a remembered write on key whose lease is
// still live at now, and forgets the key's remembered writes if so.
func (p *pendingWrites) take(key, current string, now time.Time) (stamp, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, write := range p.byKey[key] {
		if write.value == current && !expired(write.expiry, now) {
			delete(p.byKey, key)
			return write, true
		}
	}
	return stamp{}, false
}

// holds reports whether current is a remembered write on key whose lease
// is still live at now, and keeps it remembered.
func (p *pendingWrites) holds(key, current string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, write := range p.byKey[key] {
		if write.value == current && !expired(write.expiry, now) {
			return true
		}
	}
	return false
}

// takeAll forgets, and returns, every write remembered on key.
func (p *pendingWrites) takeAll(key string) []stamp {
	p.mu.Lock()
	defer p.mu.Unlock()
	writes := p.byKey[key]
	delete(p.byKey, key)
	return writes
}

func unexpired(writes []stamp, now time.Time) []stamp {
	live := writes[:0]
	for _, w := range writes {
		if !expired(w.expiry, now) {
			live = append(live, w)
		}
	}
	return live
}

// remember records a write whose reply was lost (H5), where the format lets
// us recognise it later. A bare timestamp does not: another client writing
// in the same millisecond (or second) with the same TTL writes the very same
// value, so claiming it could hand one lease to two clients. Without a
// token the Locker waits a lost write out instead, as classic clients do.
// A write carrying a queued wait's token belongs to that wait alone
// (carriesWait, protocol.go): it never enters the Locker's memory, where
// another attempt could claim it too. A queued attempt refused the queue
// writes with a token of its own (X2), which is remembered like any other.
func (l *Locker) remember(key string, write stamp) {
	if !write.carriesWait() && l.cfg.format.tokens() {
		l.pending.remember(key, write, l.cfg.clock.Now())
	}
}

// abandonLostWrites deletes, when Acquire gives up, the writes on key whose
// reply was lost (H5): nobody will claim them now, and each would hold the
// key for a lease (and on the classic path without its safety net, H6).
// They are taken out of the Locker's memory first, so none has been or can
// be granted, and each is deleted only while the key still holds it
// exactly; waiters are woken. Bounded, whatever ctx says.
func (l *Locker) abandonLostWrites(ctx context.Context, key string) {
	writes := l.pending.takeAll(key)
	if len(writes) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	for _, w := range writes {
		_, _ = l.deleteOwned(ctx, key, func(current string) bool { return current == w.value })
	}
}
