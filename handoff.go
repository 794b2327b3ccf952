package setnxlock

import (
	"context"
	"sync"
	"time"
)

// Handing a lock straight to the next waiter. Waking every waiter on each
// release (wakeup.go) makes them all race for the key and all but one go
// back to sleep: a herd that costs more round trips than it saves. Where it
// can, a waiting Acquire instead queues on the key (protocol.go), and a
// release gives the key to the first waiter in line whose Locker listens
// (handon.lua): it writes a provisional value for that waiter into the key,
// then announces it on the waiter's Locker's channel. The key is never free
// in between, so nobody barges in and waiters are served in order.
//
// Handing over costs the handed waiter a message and a claim, which is
// worth it only once it has waited: adaptive barging, after sync.Mutex.
// While the first waiter in line has waited less than the releaser's
// starvation threshold (WithStarvationThreshold, 1ms by default), the
// release frees the key and only wakes that waiter, which keeps its place,
// and whoever comes first takes the key (handon.lua). A waiter that leaves
// the queue while the key is free wakes the next in line, so that a free
// key never waits on a waiter that left (leave.lua).
//
// Heard is a provisional hold: the waiter holds the key from the moment
// it hears the handoff, until the provisional value's end, and its claim
// in the background makes that a lease (heard.go). A waiter that died
// since it queued costs the claim window, never a lease (protocol.go); one
// whose Locker listens but which is no longer waiting is declined by that
// Locker at once (abandon, route.go).
//
// A Locker listens on one channel of its own while any of its Acquire calls
// waits, and for handoffLinger after. The subscription is made outside any
// lock, with a bounded wait for its confirmation, so a subscription that
// hangs never holds up the Locker: waits fall back to polling until it is
// ready. A lost message costs one poll: the waiter finds its own token in
// the key the next time it looks (announcedPoll).
//
// Queueing needs pub/sub, a single Redis server (a Cluster counts PUBLISH
// receivers on one node only) and owner tokens in the values; a fencing
// Locker does not queue, since the token must be drawn with the write.
// protocol.go states the steps and their invariants once; the scripts in
// lua/ and, without them, watched transactions (commandqueue.go) are its
// transports. Lockers that do not queue, and those whose server or ACL
// user refuses the queue or the channel, wait for wake-ups and poll
// instead.

// handoffLinger is how long a Locker keeps listening after its last waiter
// is served, so that a worker that releases and soon waits again does not
// open a new subscription (a new connection) each time.
const handoffLinger = 250 * time.Millisecond

// defaultSubscribeTimeout bounds the wait for a subscription's
// confirmation (config.subscribeTimeout).
const defaultSubscribeTimeout = 2 * time.Second

// queues reports whether this Locker's Acquire calls wait in the key's
// queue; see the comment at the top of this file.
func (l *Locker) queues() bool {
	return l.handsOver() && l.cfg.format.tokens() && !l.cfg.fencing
}

// handsOver reports whether this Locker's releases hand the key to a
// queued waiter. The releaser's own format and fencing do not matter: the
// waiter claims the key with a value of its own.
func (l *Locker) handsOver() bool {
	return l.single && l.caps.allows(capPubSub) && l.caps.allows(capQueue)
}

// handoffs is a Locker's subscription to the keys handed to it, and the
// waits it routes them to, by the token of their queue entry.
type handoffs struct {
	id string

	mu        sync.Mutex
	sub       *subscription               // the current one; nil when not listening
	users     int                         // waits that joined sub
	idle      *time.Timer                 // stops sub handoffLinger after the last wait left
	expected  map[string]chan handoffNote // the signal of each queued wait, by its token (expect)
	abandoned map[string]abandonedEntry
	nextSweep time.Time // when abandon next forgets the expired abandoned entries
}

// subscription is one SUBSCRIBE of a Locker's channel, from the moment it
// is asked for until it ends.
type subscription struct {
	ready      chan struct{} // closed once confirmed, or failed (err)
	err        error         // written before ready is closed
	stopped    chan struct{} // closed when it stops: Close, the linger, a failure, a closed client
	stopOnce   sync.Once
	dispatched chan struct{} // closed when nothing of it runs any more
}

func newSubscription() *subscription {
	return &subscription{ready: make(chan struct{}), stopped: make(chan struct{}), dispatched: make(chan struct{})}
}

// live reports whether the subscription is confirmed and has not stopped.
func (s *subscription) live() bool {
	select {
	case <-s.ready:
	default:
		return false
	}
	select {
	case <-s.stopped:
		return false
	default:
		return s.err == nil
	}
}

func (s *subscription) stop() { s.stopOnce.Do(func() { close(s.stopped) }) }

func (h *handoffs) channel() string { return handoffChannel(h.id) }

// join makes the calling wait a user of the Locker's subscription, asking
// for one if there is none, and returns it without waiting for it: the
// caller queues once it is usable.
func (h *handoffs) join(l *Locker) *subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.sub == nil {
		h.sub = newSubscription()
		go h.listen(l, h.sub)
	}
	h.users++
	return h.sub
}

// joinIfListening joins only a subscription that is usable already.
func (h *handoffs) joinIfListening(l *Locker) *subscription {
	h.mu.Lock()
	listening := h.sub != nil && h.sub.live()
	h.mu.Unlock()
	if !listening {
		return nil
	}
	return h.join(l)
}

// unjoin ends a join; the subscription stops once no wait has joined it
// for handoffLinger.
func (h *handoffs) unjoin(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sub != s {
		return // it stopped; its users were forgotten with it
	}
	if h.users--; h.users == 0 {
		h.idle = time.AfterFunc(handoffLinger, func() { h.stopIf(func() bool { return h.users == 0 }) })
	}
}

// stopIf stops the current subscription if cond holds under the lock, and
// waits until nothing of it runs.
func (h *handoffs) stopIf(cond func() bool) {
	h.mu.Lock()
	s := h.sub
	if s == nil || !cond() {
		h.mu.Unlock()
		return
	}
	h.sub, h.users = nil, 0
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	h.mu.Unlock()
	s.stop()
	<-s.dispatched // bounded: a stopped subscription is closed, which ends listen's reads
}

// forgetIfCurrent drops s as the current subscription after it failed or
// its client closed, so that the next join asks for a new one.
func (h *handoffs) forgetIfCurrent(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sub == s {
		h.sub, h.users = nil, 0
	}
}

// listen subscribes, confirms the subscription (confirmSubscription), and
// routes what arrives until the subscription ends.
func (h *handoffs) listen(l *Locker, s *subscription) {
	defer close(s.dispatched)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // Close, or the linger, ends a subscription still being made
		select {
		case <-s.stopped:
		case <-ctx.Done():
		}
		cancel()
	}()
	pubsub := l.client.Subscribe(ctx, h.channel())
	err := confirmSubscription(ctx, pubsub, l.cfg.subscribeTimeout)
	cancel()
	if err != nil {
		_ = pubsub.Close()
		l.caps.narrow(capQueue, err) // the handoff channel is refused
		s.err = err
		close(s.ready)
		s.stop()
		h.forgetIfCurrent(s)
		return
	}
	close(s.ready)
	defer pubsub.Close()
	messages := pubsub.Channel()
	for {
		select {
		case <-s.stopped:
			return
		case msg, ok := <-messages:
			if !ok { // its client was closed
				s.stop()
				h.forgetIfCurrent(s)
				return
			}
			h.route(l, msg.Payload)
		}
	}
}
