package setnxlock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// The hand-on loop of the command transport (commandqueue.go), as
// handon.lua's with the same encodings (protocol.go): one watched
// transaction per entry, reading the key and the head of the queue with
// the WATCH, writing the provisional value and announcing it last.

// maxHandOns bounds how many entries one release or leave hands the key
// past (entries nobody heard), as handon.lua's loop ends with the queue.
const maxHandOns = 16

// handOnOwned is the hand-on loop: if key holds a value owned reports
// ours, it hands the key to the first waiter that has waited barge (0:
// any), or else deletes it, wakes the key's waiters and, when the first
// waiter has waited less, wakes that one to race for it. A handoff nobody
// heard is handed on while the key holds exactly the provisional value
// written for it (protocol.go). It reports whether the key was ours; once
// it was handed on or freed, what goes wrong handing on costs the claim
// window, and is not the caller's failure.
//
// Listeners at the head of the queue (waits on wake-ups, wakelisten.go)
// are dropped one transaction each, and leave the key as it was: ours.
// Until a step has handed the key on or freed it, a step that fails, or a
// loop that runs out of steps, frees the key (freeOwned) rather than
// report it handed on: a Release told so would leave its own value to a
// lease nobody holds (the chaos run's slow-free-wait, mode classic).
func (q commandQueue) handOnOwned(ctx context.Context, key string, owned func(string) bool, barge time.Duration) (bool, error) {
	ours, listeners, moved := false, false, false
	for range maxHandOns {
		step, err := q.handOnce(ctx, key, owned, barge, listeners)
		if !moved && (errors.Is(err, redis.TxFailedErr) || ours && err != nil) {
			// The queue kept changing under the watch (waiters arriving,
			// leaving), or a step after a listener's drop failed: release
			// as if nobody queued, and wake the first in line, rather than
			// fail the release or leave the key ours.
			return q.freeOwned(ctx, key, owned)
		}
		if !ours && (err != nil || !step.written) {
			return false, err
		}
		ours = true
		if err == nil && step.malformed != "" {
			listeners = true // woken by the step that frees or hands the key
			continue         // dropped a first entry that is not one: the key is still ours, for the next
		}
		if err != nil || !step.written || !step.unheard() || !step.handed {
			return true, nil // handed and heard, freed, or moved on since
		}
		moved = true
		// Nobody heard the handoff: hand the key on from that provisional
		// value, at once and whatever the next waiter's wait.
		provisional := step.provisional
		owned, barge = func(current string) bool { return current == provisional }, 0
	}
	if !moved {
		return q.freeOwned(ctx, key, owned) // only listeners dropped: the key is still ours
	}
	return true, nil
}

// freeOwned deletes key while it holds a value owned reports ours, with
// the wake-up of its listeners (deleteOwned), and wakes the first in line
// to race for it.
func (q commandQueue) freeOwned(ctx context.Context, key string, owned func(string) bool) (bool, error) {
	deleted, err := q.l.deleteOwned(ctx, key, owned)
	if deleted {
		q.wakeHead(ctx, key)
	}
	return deleted, err
}

// handStep is one transaction of the hand-on loop: what it read of the
// queue, what it decided and what it wrote.
type handStep struct {
	head        *headOf       // the first waiter, if any
	malformed   string        // a first entry that is not one: dropped alone, the key left as it is
	handed      bool          // the key was handed to head; else freed, and head woken
	provisional string        // the value written for head, when handed
	end         string        // the end provisional states, as written (provisionalEnd)
	net         time.Duration // provisional's server expiry (provisionalNet)
	waiters     string        // the key's queue (waitersOf)
	heard       *redis.IntCmd
	written     bool
	listeners   bool // earlier steps took listeners off the queue (protocol.go): wake them
}

// unheard reports whether the step announced the key to a waiter whose
// Locker nobody listens for.
func (s *handStep) unheard() bool { return s.written && s.heard != nil && s.heard.Val() == 0 }

// writeTo adds the step's writes to pipe: the drop of a first entry that
// is not one (as handon.lua skips it, the key is then handed to the next
// in line), the handoff (write, then announce), or the delete, the wake-up
// of the key's waiters and of the first in line. The key's wake channel
// hears of it only when the queue held anyone, a listener included: an
// uncontended release publishes nothing nobody hears.
func (s *handStep) writeTo(ctx context.Context, pipe redis.Pipeliner, key string) {
	waiters := s.waiters
	if s.malformed != "" {
		pipe.ZRem(ctx, waiters, s.malformed)
		return
	}
	if s.handed {
		pipe.ZRem(ctx, waiters, s.head.member)
		pipe.Set(ctx, key, s.provisional, 0)
		pipe.PExpire(ctx, key, s.net)                                                                       // H6: not before the end it states, until which its waiter may hold on it
		s.heard = pipe.Publish(ctx, handoffChannel(s.head.locker), formatPayload(s.head.token, s.end, key)) // write, then announce
		if s.listeners {
			pipe.Publish(ctx, WakeChannel(key), key)
		}
		return
	}
	pipe.Del(ctx, key)
	if s.head != nil || s.listeners {
		pipe.Publish(ctx, WakeChannel(key), key)
	}
	if s.head != nil { // wake it to race for the key; it keeps its place
		s.heard = pipe.Publish(ctx, handoffChannel(s.head.locker), formatPayload(s.head.token, "", key))
	}
}

// handOnce is one watched transaction of handOnOwned: WATCH key and its
// queue with GET and the head of the queue, then, if owned, the step. A
// wake-up nobody heard takes that entry off the queue and wakes the next.
func (q commandQueue) handOnce(ctx context.Context, key string, owned func(string) bool, barge time.Duration, listeners bool) (handStep, error) {
	waiters := q.l.waitersOf(key)
	also := []string{waiters}
	line, permit := q.l.permitLineOf(key)
	if permit {
		also = append(also, line.count) // handed on only while below the recorded count (protocol.go)
	}
	var head *redis.ZSliceCmd
	var count *redis.StringCmd
	var step handStep
	written, err := q.l.watchedWrite(ctx, key, watched{
		also: also,
		read: func(pipe redis.Pipeliner) {
			head = pipe.ZRangeWithScores(ctx, waiters, 0, 0)
			if permit {
				count = pipe.Get(ctx, line.count)
			}
		},
		owned: owned,
		write: func(pipe redis.Pipeliner) error {
			h, malformed, err := readHead(head)
			if err != nil {
				return err
			}
			if permit {
				past, err := pastCount(count, line.index)
				if err != nil {
					return err
				}
				if past {
					h, malformed, listeners = nil, "", true // deleted, and its waiters woken, as handon.lua does
				}
			}
			now := q.l.cfg.clock.Now()
			step = handStep{head: h, malformed: malformed, waiters: waiters, listeners: listeners}
			step.handed = h != nil && (barge == 0 || now.Sub(h.since) >= barge) // 0: whatever the clocks
			if step.handed {
				step.provisional = provisionalValue(now, h.token)
				step.end, step.net = provisionalEnd(now), q.l.provisionalNet()
			}
			step.writeTo(ctx, pipe, key)
			return nil
		},
	})
	step.written = written
	if err != nil {
		return handStep{}, err
	}
	if step.unheard() && !step.handed {
		// A wake-up nobody heard: that entry's Locker is gone. It leaves
		// the queue and the next in line is woken instead.
		_ = q.l.client.ZRem(ctx, waiters, step.head.member).Err()
		q.wakeHead(ctx, key)
	}
	return step, nil
}

// headOf is a queue's first entry, as read in a release's transaction.
type headOf struct {
	member string
	locker string // the entry's Locker id
	token  string
	since  time.Time // its arrival, by its clock
}

// readHead reads a queue's first entry: nil when the queue is empty or is
// not a sorted set; nil and the entry as malformed when it is not one
// (parseEntry: nobody to hand to; the release drops it).
func readHead(cmd *redis.ZSliceCmd) (head *headOf, malformed string, err error) {
	zs, err := cmd.Result()
	if isWrongType(err) {
		return nil, "", nil // not a queue: nobody to hand to
	}
	if err != nil || len(zs) == 0 {
		return nil, "", err
	}
	member, _ := zs[0].Member.(string)
	locker, token, ok := parseEntry(member)
	if !ok {
		return nil, member, nil
	}
	return &headOf{member: member, locker: locker, token: token, since: time.UnixMicro(int64(zs[0].Score))}, "", nil
}

// wakeHead wakes the first waiter in key's queue, when the key is free and
// nobody else will: after a wake-up nobody heard, or a leave.
func (q commandQueue) wakeHead(ctx context.Context, key string) {
	zs, err := q.l.client.ZRange(ctx, q.l.waitersOf(key), 0, 0).Result()
	if err != nil || len(zs) == 0 {
		return
	}
	if locker, token, ok := parseEntry(zs[0]); ok {
		_ = q.l.client.Publish(ctx, handoffChannel(locker), formatPayload(token, "", key)).Err()
	}
}

// pastCount applies handOn's rule for a permit of a semaphore's one queue
// (handon.lua): a permit at index is handed on only while index is below
// the count read at the semaphore's count key. A missing count limits
// nothing (the next acquisition records it again); one that is not a
// count (parseCount, or a key of another type) hands nothing on.
func pastCount(get *redis.StringCmd, index int) (bool, error) {
	value, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case isWrongType(err):
		return true, nil
	case err != nil:
		return false, err
	}
	n, err := parseCount(value)
	return err != nil || index >= n, nil
}
