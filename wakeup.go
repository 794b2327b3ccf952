package setnxlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waking waiters without blind polling: Release publishes on a channel of
// the key (inside the release script, or beside the DEL in the release
// transaction), and a waiting Acquire that does not queue subscribes to it
// at its first refusal and sleeps until a release is announced (wait.go).
// The timed backoff, which is aware of the holder's expiry, stays as the
// fallback for holders that crashed or do not publish (classic clients of
// other languages), and for servers or ACL users without pub/sub, where a
// Locker stops trying it.

// announcedPoll is how often a waiter that listens still polls a holder
// that announces its release, in case the announcement is lost: the
// holder's PUBLISH was refused, or the subscription dropped. The holder's
// expiry still cuts the wait short.
const announcedPoll = 50 * time.Millisecond

// wakeup is one Acquire's subscription to its key's releases.
type wakeup struct {
	pubsub   *redis.PubSub
	messages <-chan *redis.Message // nil once the subscription is gone
}

// subscribe listens for releases of key. It returns nil, and the wait
// polls, when pub/sub is unavailable; a refusal by the server or ACL turns
// wake-ups off for the Locker. The confirmation is awaited at most the
// Locker's subscribe timeout, and no longer than ctx, so a subscription
// that hangs never holds up the wait.
func (l *Locker) subscribe(ctx context.Context, key string) *wakeup {
	if !l.caps.allows(capPubSub) {
		return nil
	}
	pubsub := l.client.Subscribe(ctx, WakeChannel(key))
	if err := confirmSubscription(ctx, pubsub, l.cfg.subscribeTimeout); err != nil {
		_ = pubsub.Close()
		l.caps.narrow(capPubSub, err)
		return nil
	}
	return &wakeup{pubsub: pubsub, messages: pubsub.Channel()}
}

// confirmSubscription waits for pubsub's confirmation at most timeout, and
// no longer than ctx. go-redis bounds a read by a context's deadline but
// not by its cancellation, so when ctx ends first the subscription is
// closed, which ends the read.
func confirmSubscription(ctx context.Context, pubsub *redis.PubSub, timeout time.Duration) error {
	confirmed := make(chan error, 1)
	go func() {
		_, err := pubsub.ReceiveTimeout(context.WithoutCancel(ctx), timeout)
		confirmed <- err
	}()
	select {
	case err := <-confirmed:
		return err
	case <-ctx.Done():
		_ = pubsub.Close()
		<-confirmed // bounded: the closed connection ends the read
		return ctx.Err()
	}
}

// announced returns the channel of announced releases: nil (never ready)
// for a nil wakeup or one whose subscription is gone.
func (w *wakeup) announced() <-chan *redis.Message {
	if w == nil {
		return nil
	}
	return w.messages
}

// drain consumes the releases announced so far. A closed channel means the
// subscription is gone (its client was closed): it would read as a release
// announced on every wait, a spin, so the wait forgets it and polls.
func (w *wakeup) drain() {
	for {
		select {
		case _, ok := <-w.messages:
			if !ok {
				w.messages = nil
				return
			}
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
