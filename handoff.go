package setnxlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Handing a lock straight to the next waiter. Waking every waiter on each
// release (wakeup.go) makes them all race for the key and all but one go
// back to sleep: a herd that costs more round trips than it saves. Where it
// can, a waiting Acquire instead queues on the key, and the release script
// gives the key to the first waiter that is still listening: it writes that
// waiter's lease into the key, in place of our own, and publishes it to the
// waiter's Locker. The key is never free in between, so nobody barges in,
// waiters are served in order, and the new holder learns it holds the lock
// without a round trip of its own.
//
// The key keeps holding an ordinary lock value, expiry first, so classic
// clients and the takeover of a crashed holder's lease (deadlock.go) work
// as before. What is new is only who writes the next value: the releasing
// Locker, with its clock, which is one of the clocks the skew bound (H4)
// already covers. The new holder believes exactly the expiry written.
//
// The queue lives in waitersKey(key), a list in the key's Cluster slot, of
// entries "<lease ms>:<safety net ms>:<Locker id>:<owner token>". A Locker
// listens on one channel of its own while any of its Acquire calls waits.
// A waiter that has gone is skipped: the release's PUBLISH reaches no one
// when its Locker no longer listens (its process died, say), and a waiter
// that gives up removes its entry, and hands on the lock if it was handed
// it meanwhile. A dropped message costs one poll: the waiter finds its own
// token in the key the next time it looks (announcedPoll).
//
// Queueing needs scripts, pub/sub, a single Redis server (a Cluster counts
// PUBLISH receivers on one node only) and owner tokens in the values; a
// fencing Locker does not queue, since the token must be drawn with the
// write. Those waiters, and Lockers whose server or ACL user refuses the
// queue or the channel, wait for wake-ups and poll as before.

// handoffChannelPrefix starts the channel a Locker listens on for locks
// handed to it; the release script appends the Locker's id.
const handoffChannelPrefix = "setnxlock:handoff:"

// handoffLinger is how long a Locker keeps listening after its last waiter
// is served, so that a worker that releases and soon waits again does not
// open a new subscription (a new connection) each time.
const handoffLinger = 250 * time.Millisecond

// leaveTimeout bounds the round trip that takes a waiter off the queue
// after its context ended.
const leaveTimeout = time.Second

// waitersKey names the queue of waiters for key, in key's Cluster slot.
func waitersKey(key string) string { return sameSlotKey(key, ".waiters") }

// queueEntry is one waiting Acquire's place in a key's queue.
type queueEntry struct {
	token  string // carried by the lease handed to it, and by its own attempts
	member string // what it pushes on the queue
	pushed bool   // an attempt may have pushed it: remove that entry before pushing again
}

// newQueueEntry describes a lease of the Locker's TTL for a waiter.
func (l *Locker) newQueueEntry() *queueEntry {
	token := newToken()
	ttl := l.cfg.ttl.Milliseconds()
	net := l.safetyNet(l.cfg.ttl).Milliseconds()
	return &queueEntry{token: token, member: strconv.FormatInt(ttl, 10) + ":" + strconv.FormatInt(net, 10) + ":" + l.handoff.id + ":" + token}
}

// queues reports whether this Locker's Acquire calls wait in the key's
// queue; see the comment at the top of this file.
func (l *Locker) queues() bool {
	return l.handsOver() && l.cfg.format.tokens() && !l.cfg.fencing
}

// handsOver reports whether this Locker's releases hand the key to a
// queued waiter. The releaser's own format and fencing do not matter: the
// waiter's entry says what to write.
func (l *Locker) handsOver() bool {
	_, single := l.client.(*redis.Client)
	return single && l.scripts.usable() && l.wakeups.usable() && l.handoff.usable()
}

// waitInQueue is Acquire once its first attempt was refused and the Locker
// queues: it listens for a handed lock, queues, and attempts again now and
// then in case a message was lost or the holder crashed. It returns
// queued false, and nothing else, when queueing turns out to be refused:
// the caller then waits as before.
func (l *Locker) waitInQueue(ctx context.Context, key string) (lock *Lock, err error, queued bool) {
	if err := l.handoff.join(ctx, l); err != nil {
		return nil, nil, false
	}
	defer l.handoff.leave()
	entry := l.newQueueEntry()
	handed := l.handoff.expect(entry.token)
	defer l.handoff.forget(entry.token)
	timer := time.NewTimer(announcedPoll) // reset before each wait
	defer timer.Stop()
	for {
		lock, refused, err := l.tryAcquire(ctx, key, entry)
		if err == nil {
			return lock, nil, true
		}
		entry.pushed = true
		switch {
		case ctx.Err() != nil:
			l.leaveQueue(ctx, key, entry)
			return nil, contextEnded(key, ctx.Err(), err), true
		case !retryable(err):
			l.leaveQueue(ctx, key, entry)
			return nil, err, true
		case !l.queues():
			l.leaveQueue(ctx, key, entry) // refused on the way: wait as before
			return nil, nil, false
		}
		wait := announcedPoll
		if !refused.takeableAt.IsZero() {
			wait = capAtLease(wait, refused.takeableAt.Sub(l.cfg.clock.Now()), l.cfg.minBackoff)
		}
		timer.Reset(wait)
		select {
		case value := <-handed:
			if lock, err := l.takeHanded(key, value); err == nil {
				return lock, nil, true
			}
			// Over before we heard of it: the next attempt sees the key.
			// (Since Go 1.23 Reset needs no drained channel, and draining
			// after a failed Stop would block for good.)
		case <-timer.C:
		case <-ctx.Done():
			l.leaveQueue(ctx, key, entry)
			return nil, contextEnded(key, ctx.Err(), nil), true
		}
	}
}

// takeHanded turns a value a release wrote for us into our Lock.
func (l *Locker) takeHanded(key, value string) (*Lock, error) {
	expiry, err := parseExpiry(value)
	if err != nil {
		return nil, fmt.Errorf("setnxlock: handed %q: %w", key, err)
	}
	return l.grant(key, lease{value: value, expiry: expiry, start: expiry.Add(-l.cfg.ttl)}, 0, EventAcquired)
}

// leaveQueue takes entry off key's queue and, if a release handed it the
// key meanwhile, hands the key on (or deletes it) in the same script. The
// caller's context may have ended, so it runs on its own short deadline.
func (l *Locker) leaveQueue(ctx context.Context, key string, entry *queueEntry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	_, _ = l.runRelease(ctx, key, "t", entry.member, entry.token)
}

// handoffs is a Locker's subscription to the locks handed to it: one
// channel, listened on while any of its Acquire calls waits in a queue and
// for handoffLinger after, and the waiters it routes handed values to, by
// owner token.
type handoffs struct {
	featureSwitch // off for good once the server or ACL refuses the channel or the queue
	id            string

	mu         sync.Mutex
	pubsub     *redis.PubSub
	dispatched chan struct{} // closed when the routing goroutine of pubsub returns
	users      int
	idle       *time.Timer
	waiting    map[string]chan string
}

func (h *handoffs) channel() string { return handoffChannelPrefix + h.id }

// join makes sure the Locker listens, before its caller queues: a lock
// handed to an entry is then always heard (or found by the next attempt).
func (h *handoffs) join(ctx context.Context, l *Locker) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.pubsub == nil {
		pubsub := l.client.Subscribe(ctx, h.channel())
		if _, err := pubsub.Receive(ctx); err != nil { // the subscription's confirmation
			_ = pubsub.Close()
			h.fallBackIfRefused(err)
			return err
		}
		h.pubsub, h.dispatched = pubsub, make(chan struct{})
		go h.dispatch(pubsub.Channel(), h.dispatched)
	}
	h.users++
	return nil
}

// listening reports whether the Locker listens for handed locks now.
func (h *handoffs) listening() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pubsub != nil
}

// leave ends a join; the subscription closes once no waiter has joined
// for handoffLinger.
func (h *handoffs) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.users--; h.users == 0 {
		h.idle = time.AfterFunc(handoffLinger, func() { h.closeIf(func() bool { return h.users == 0 }) })
	}
}

// closeIf closes the subscription if cond holds under the lock, and waits
// for its routing goroutine to return.
func (h *handoffs) closeIf(cond func() bool) {
	h.mu.Lock()
	if !cond() || h.pubsub == nil {
		h.mu.Unlock()
		return
	}
	pubsub, dispatched := h.pubsub, h.dispatched
	h.pubsub, h.dispatched = nil, nil
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	h.mu.Unlock()
	_ = pubsub.Close()
	<-dispatched
}

// expect registers a waiter's token; forget ends it.
func (h *handoffs) expect(token string) <-chan string {
	ch := make(chan string, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiting == nil {
		h.waiting = make(map[string]chan string)
	}
	h.waiting[token] = ch
	return ch
}

func (h *handoffs) forget(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.waiting, token)
}

// dispatch routes each handed value to the waiter whose token it carries.
// A value for a waiter that is gone is dropped: that waiter took its entry
// off the queue and handed the key on (leaveQueue), or found the value
// itself in the key and holds the lock.
func (h *handoffs) dispatch(messages <-chan *redis.Message, done chan struct{}) {
	defer close(done)
	for msg := range messages {
		h.mu.Lock()
		ch := h.waiting[tokenOf(msg.Payload)]
		h.mu.Unlock()
		if ch != nil {
			select {
			case ch <- msg.Payload:
			default: // it already has one
			}
		}
	}
}

// Close stops the Locker's background listening for handed locks at once,
// instead of handoffLinger after its last waiter. It never fails and the
// Locker stays usable; call it when the Locker is no longer needed, so no
// goroutine or connection of it outlives its use.
func (l *Locker) Close() error {
	l.handoff.closeIf(func() bool { return true })
	return nil
}
