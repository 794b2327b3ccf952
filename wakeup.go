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
// expiry still cuts the wait short. It is the Locker's config.announcedPoll,
// which tests that tell how a wait was served lengthen.
const announcedPoll = 50 * time.Millisecond

// wakeup is one Acquire's subscription to its key's releases. It is made
// in the background: until it is confirmed the wait polls on its backoff,
// so a SUBSCRIBE whose confirmation is late or lost (a half-open
// connection) never holds up a wait on a key that is free meanwhile.
type wakeup struct {
	cancel context.CancelFunc // ends a subscription still being made
	ready  chan struct{}      // closed once the subscription is confirmed or has failed
	pubsub *redis.PubSub      // written before ready is closed; nil when it failed

	// Owned by the waiting goroutine.
	seen     bool                  // the wait has learned that ready is closed
	messages <-chan *redis.Message // nil until seen, and once the subscription is gone
}

// subscribe starts listening for releases of key and returns at once; it
// returns nil, and the wait only polls, when pub/sub is unavailable. A
// refusal by the server or ACL turns wake-ups off for the Locker. The
// confirmation is awaited at most the Locker's subscribe timeout, and no
// longer than ctx or the wakeup's close.
func (l *Locker) subscribe(ctx context.Context, key string) *wakeup {
	return l.subscribeTo(ctx, WakeChannel(key))
}

// subscribeTo is subscribe to any of the library's channels: an
// election's observers listen on two (elections.go).
func (l *Locker) subscribeTo(ctx context.Context, channels ...string) *wakeup {
	if !l.caps.allows(capPubSub) {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &wakeup{cancel: cancel, ready: make(chan struct{})}
	go func() {
		defer close(w.ready)
		pubsub := l.client.Subscribe(ctx, channels...)
		if err := confirmSubscription(ctx, pubsub, l.cfg.subscribeTimeout); err != nil {
			_ = pubsub.Close()
			l.caps.narrow(capPubSub, err)
			return
		}
		w.pubsub = pubsub
	}()
	return w
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

// confirming returns a channel that is ready once the subscription is
// confirmed or has failed, and that the wait has not yet seen ready: the
// wait then attempts at once, so that a release between its last attempt
// and the confirmation is not left unheard. Nil (never ready) otherwise.
func (w *wakeup) confirming() <-chan struct{} {
	if w == nil || w.seen {
		return nil
	}
	return w.ready
}

// confirmed records that the wait has seen the subscription settle, and
// starts reading its announcements if it was confirmed.
func (w *wakeup) confirmed() {
	w.seen = true
	if w.pubsub != nil {
		w.messages = w.pubsub.Channel()
	}
}

// listening reports whether releases are announced to the wait: its
// subscription is confirmed, the wait has attempted since (it has seen the
// confirmation), and the subscription has not gone.
func (w *wakeup) listening() bool { return w != nil && w.messages != nil }

// announced returns the channel of announced releases: nil (never ready)
// unless the wait is listening.
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

// close ends the subscription, or its making, and waits until nothing of
// it runs; a nil wakeup is fine.
func (w *wakeup) close() {
	if w == nil {
		return
	}
	w.cancel()
	<-w.ready // bounded: the cancelled context ends the confirmation (confirmSubscription)
	if w.pubsub != nil {
		_ = w.pubsub.Close()
	}
}
