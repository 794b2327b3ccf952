package setnxlock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// A wait on wake-ups lists itself in its key's queue as a listener, so
// that a release by a Locker that hands over, which publishes on the wake
// channel only when the queue held anyone (release.lua, commandhandon.go),
// is heard by it. The listener's form is stated in protocol.go
// (formatListener): not an entry, so nobody hands the key to it; a
// release that finds it takes it off and publishes. So the wait lists
// itself before every attempt once its subscription is confirmed, after
// each wake-up and on each poll: a release before the listing is seen by
// the attempt that follows it, and one after it is heard (the invariant in
// wait.go's header comment). Releases of Lockers that do not hand over
// (a Cluster) publish always.

// listen lists the wait as a listener before an attempt it will rely on
// its wake-ups for, with the queue's expiry rules (queued.lua): the queue
// lives as long as its longest waiter's safety net, and is refreshed once
// it has run down to half of ours. A wait whose listing failed (the queue
// refused by ACL, or not a sorted set) is not listed, and polls on its
// backoff rather than rely on announcements.
func (w *waiting) listen(ctx context.Context) {
	w.listed = false
	if w.mode != wakeUps || !w.wake.listening() || !w.l.caps.allows(capQueue) {
		return
	}
	if w.listener == "" {
		w.listener = formatListener(newToken())
	}
	w.listed = w.l.listIn(ctx, w.listener, w.key)
}

// listIn lists listener in the queue of each of keys (listen; a group's
// wait lists itself on every key, groupwait.go) and reports whether it
// was listed everywhere.
func (l *Locker) listIn(ctx context.Context, listener string, keys ...string) bool {
	net := l.safetyNet(l.cfg.ttl)
	ttls := make([]*redis.DurationCmd, len(keys))
	_, err := l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, key := range keys {
			waiters := waitersKey(key)
			pipe.ZAdd(ctx, waiters, redis.Z{Score: float64(l.cfg.clock.Now().UnixMicro()), Member: listener})
			ttls[i] = pipe.PTTL(ctx, waiters)
		}
		return nil
	})
	for i := 0; err == nil && i < len(keys); i++ {
		if ttls[i].Val() < net/2 {
			err = l.client.PExpire(ctx, waitersKey(keys[i]), net).Err()
		}
	}
	l.caps.narrow(capQueue, err) // refused the queue: not listed, ever; this Locker's releases publish always
	return err == nil
}

// unlist takes the wait's listener off its key's queue when the wait
// ends, if it ever listed one; a release that finds one left (this failed)
// takes it off and publishes once. The caller's context may have ended:
// it runs on its own short deadline.
func (w *waiting) unlist(ctx context.Context) {
	if w.listener == "" {
		return
	}
	w.l.unlistFrom(ctx, w.listener, w.key)
	w.listener, w.listed = "", false
}

// unlistFrom takes listener off the queue of each of keys, on its own
// short deadline whatever ctx says (unlist).
func (l *Locker) unlistFrom(ctx context.Context, listener string, keys ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	for _, key := range keys {
		_ = l.client.ZRem(ctx, waitersKey(key), listener).Err()
	}
}
