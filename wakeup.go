package setnxlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Handing a lock over without blind polling: Release publishes on a channel
// of the key (inside the release script, or beside the DEL in the release
// transaction) and Acquire, once its first attempt is refused, subscribes to
// it and sleeps until a release is announced. The timed backoff, which is
// aware of the holder's expiry, stays as the fallback for holders that
// crashed or do not publish (classic clients of other languages), and for
// servers or ACL users without pub/sub, where a Locker stops trying it.
//
// No wake-up is lost: the waiter subscribes first and then attempts once
// more before it sleeps, so a release that happened before the subscription
// is seen by that attempt, and one after it is heard.

// WakeChannel returns the pub/sub channel on which a Locker announces the
// release of key and its waiters listen. ACL users need it among their
// allowed channels (&pattern) for wake-ups; without it locks still work,
// by polling.
func WakeChannel(key string) string { return "setnxlock:released:" + key }

// announcedPoll is how often a subscribed waiter still polls a holder that
// announces its release, in case the announcement is lost: the holder's
// PUBLISH was refused, or the subscription dropped. The holder's expiry
// still cuts the wait short.
const announcedPoll = 50 * time.Millisecond

// wakeup is one Acquire's subscription to its key's releases.
type wakeup struct {
	pubsub   *redis.PubSub
	messages <-chan *redis.Message
}

// subscribe listens for releases of key. It returns nil, and Acquire polls
// as before, when pub/sub is unavailable; a refusal by the server or ACL
// turns wake-ups off for the Locker.
func (l *Locker) subscribe(ctx context.Context, key string) *wakeup {
	if !l.wakeups.usable() {
		return nil
	}
	pubsub := l.client.Subscribe(ctx, WakeChannel(key))
	if _, err := pubsub.Receive(ctx); err != nil { // the subscription's confirmation
		_ = pubsub.Close()
		l.wakeups.fallBackIfRefused(err)
		return nil
	}
	return &wakeup{pubsub: pubsub, messages: pubsub.Channel()}
}

// sleep waits for d, for a release of the key, or for ctx to end, and
// returns ctx.Err() in the last case. A nil wakeup just sleeps.
func (w *wakeup) sleep(ctx context.Context, d time.Duration) error {
	if w == nil {
		return sleep(ctx, d)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	case <-w.messages:
		w.drain() // one attempt answers every release announced so far
	}
	return nil
}

func (w *wakeup) drain() {
	for {
		select {
		case <-w.messages:
		default:
			return
		}
	}
}

// close ends the subscription; a nil wakeup is fine.
func (w *wakeup) close() {
	if w != nil {
		_ = w.pubsub.Close()
	}
}
