package setnxlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// The queue's contract suite. The queue protocol has two transports, the
// scripts (lua/) and the commands in watched transactions (WithoutScripts,
// WithClassicCommands, or scripts refused), and every behaviour of the
// queue holds on both: its tests run through onEachQueueingPath
// (handoff_test.go), the one switch, on miniredis and on redis-server. A
// test that needs one step of the protocol to misbehave names the step
// (queueStep); this file says how each transport sends it. What is left to
// one transport tests that transport's own detail and says so in its name
// or comment.

// queueStep is one step of the queue protocol, as a waiter or a releaser
// sends it on either transport.
type queueStep string

const (
	// stepQueue is the write that puts a wait in the queue: queued.lua, or
	// the commands' pipeline with the ZADD.
	stepQueue queueStep = "queue"
	// stepClaim is the write of a queued attempt that takes a key handed to
	// it: a run of queued.lua that won, or the commands' transaction that
	// SETs the waiter's lease and takes its entry off the queue.
	stepClaim queueStep = "claim"
	// stepHandoff is the release's write of the handoff: release.lua, or
	// the commands' transaction that SETs the provisional value and
	// PUBLISHes it.
	stepHandoff queueStep = "handoff"
	// stepLeave is the first write of a wait leaving the queue: leave.lua,
	// or the commands' ZREM sent alone.
	stepLeave queueStep = "leave"
)

// sentBy reports whether cmds, one command or a pipeline as a client sent
// them, are this step. A claim on the scripts is told by its reply, so
// only once cmds have been answered.
func (s queueStep) sentBy(cmds []redis.Cmder) bool {
	if len(cmds) == 1 && cmds[0].Name() == "evalsha" {
		script := scriptNames[fmt.Sprint(cmds[0].Args()[1])]
		switch s {
		case stepQueue:
			return script == "queued"
		case stepClaim:
			reply, _ := cmds[0].(*redis.Cmd)
			won := reply != nil && scriptOutcome(sliceOf(reply.Val())) == queuedWon // claim.lua's 1 too
			return (script == "queued" || script == "claim") && won
		case stepHandoff:
			return script == "release"
		}
		return script == "leave"
	}
	names := map[string]bool{}
	for _, cmd := range cmds {
		names[cmd.Name()] = true
	}
	transaction := len(cmds) > 2 && cmds[0].Name() == "multi"
	switch s {
	case stepQueue:
		return names["zadd"] && !transaction
	case stepClaim:
		return transaction && names["set"] && names["zrem"] && !names["publish"]
	case stepHandoff:
		return transaction && names["set"] && names["publish"]
	}
	return len(cmds) == 1 && names["zrem"]
}

// stepHook runs around on every run of step a client sends, alone or in a
// pipeline; around receives the send and the commands.
type stepHook struct {
	step   queueStep
	around func(send func() error, cmds []redis.Cmder) error
}

func hookStep(c *redis.Client, step queueStep, around func(send func() error, cmds []redis.Cmder) error) {
	c.AddHook(stepHook{step: step, around: around})
}

func (h stepHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h stepHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.around(func() error { return next(ctx, cmd) }, []redis.Cmder{cmd})
	}
}

func (h stepHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if isTransactionCheck(cmds) {
			return next(ctx, cmds)
		}
		return h.around(func() error { return next(ctx, cmds) }, cmds)
	}
}

// loseStepReply makes the client's first run of step reach the server and
// be applied, but report its reply lost (H5), and reports whether it has.
func loseStepReply(c *redis.Client, step queueStep) *atomic.Bool {
	lost := new(atomic.Bool)
	hookStep(c, step, func(send func() error, cmds []redis.Cmder) error {
		err := send()
		if step.sentBy(cmds) && lost.CompareAndSwap(false, true) {
			return errLostReply{}
		}
		return err
	})
	return lost
}

// gateStep stops the client before its first run of step (not stepClaim,
// which the scripts tell only by its reply) until the test passes the gate.
func gateStep(t *testing.T, c *redis.Client, step queueStep) *gate {
	g := &gate{arrived: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.pass) // a failed test must not strand the gated client
	var once sync.Once
	hookStep(c, step, func(send func() error, cmds []redis.Cmder) error {
		if step.sentBy(cmds) {
			once.Do(func() {
				close(g.arrived)
				<-g.open // bounded: the test passes the gate, or its cleanup does
			})
		}
		return send()
	})
	return g
}

// servings records the order in which waits are served, each releasing
// the key at once.
type servings struct {
	served   chan string
	released chan error
}

func newServings(n int) *servings {
	return &servings{served: make(chan string, n), released: make(chan error, n)}
}

// wait starts an Acquire of key on l, served under name.
func (s *servings) wait(t *testing.T, name string, l *Locker, key string) {
	waitCtx := await.Context(t)
	go func() {
		lock, err := l.Acquire(waitCtx, key)
		if err != nil {
			s.released <- err
			return
		}
		s.served <- name
		s.released <- lock.Release(ctx)
	}()
}

// order waits until every wait was served and released, and returns their
// names in the order served.
func (s *servings) order(t *testing.T) []string {
	t.Helper()
	var order []string
	for range cap(s.served) {
		require.NoError(t, await.Recv(t, s.released, "a waiter served and releasing"))
		order = append(order, await.Recv(t, s.served, "the next waiter served"))
	}
	return order
}

// H5 at the queue's first step: the write that queued a wait was applied
// and its reply lost. The wait keeps the place that write took (first
// come, first served) and a single entry, and is served before a waiter
// that queued after it.
func TestAWaitWhoseQueueingReplyWasLostKeepsItsPlace(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		firstClient := b.client(t)
		lost := loseStepReply(firstClient, stepQueue)
		first := b.lockerOn(t, firstClient, path)
		warm(t, first)
		s := newServings(2)
		s.wait(t, "first", first, "lock.k")
		entry := b.queued(t, "lock.k", 1)[0]
		s.wait(t, "second", b.locker(t, path), "lock.k")
		entries := b.queued(t, "lock.k", 2)
		// The entry is in Redis once the server applied the write; the hook
		// reports the reply lost only when the first waiter's goroutine runs
		// again, which under load can come after the second wait queued.
		require.Eventually(t, lost.Load, await.Timeout, time.Millisecond, "the reply of the write that queued the first wait was lost")
		assert.Equal(t, entry, entries[0], "the wait whose reply was lost is first in line")

		require.NoError(t, holder.Release(ctx))
		assert.Equal(t, []string{"first", "second"}, s.order(t))
		assert.Empty(t, b.queuedNow("lock.k"))
	})
}

// H5 at the claim: a waiter claimed the key handed to it and the reply was
// lost. Its claim, sent again (heard.go), or its next attempt, finds its
// own lease and holds the key with it
// (H10: a lease stating no earlier end than the waiter believes); its
// entry is off the queue and nobody else gets in.
func TestAClaimWhoseReplyWasLostStillHoldsTheKey(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		client := b.client(t)
		lost := loseStepReply(client, stepClaim)
		w := b.lockerOn(t, client, path)
		warm(t, w)
		waiter := acquireInBackground(t, w, "lock.k")
		entry := b.queued(t, "lock.k", 1)[0]

		require.NoError(t, holder.Release(ctx))
		lock := await.Recv(t, waiter, "the waiter's Acquire")
		require.NotNil(t, lock)
		require.True(t, lost.Load(), "the claim's reply was lost")
		assert.Equal(t, entryToken(entry), lock.token)
		require.Equal(t, lock.value, b.value(t, "lock.k"), "the waiter holds the key with its own lease")
		states, err := parseExpiry(lock.value)
		require.NoError(t, err)
		assert.False(t, states.Before(lock.ExpiresAt()), "the key states %v; the holder believes %v", states, lock.ExpiresAt())
		assert.Empty(t, b.queuedNow("lock.k"), "the claim took the entry off the queue")
		_, err = b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "nobody else gets in")
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// H5 at the release's handoff: it was applied and its reply lost. The
// Release reports the doubt; the waiter holds the key; the Release called
// again reports success and leaves the waiter's lease alone.
func TestAHandoffWhoseReplyWasLostIsReleasedOnceAndLeavesTheWaiterAlone(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		client := b.client(t)
		loseStepReply(client, stepHandoff)
		l := b.lockerOn(t, client, path)
		warm(t, l)
		holder, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		waiter := acquireInBackground(t, b.locker(t, path), "lock.k")
		entry := b.queued(t, "lock.k", 1)[0]

		require.Error(t, holder.Release(ctx), "the reply was lost: the release is in doubt")
		lock := await.Recv(t, waiter, "the waiter's Acquire")
		require.NotNil(t, lock)
		assert.Equal(t, entryToken(entry), lock.token, "handed to the waiter")
		require.Equal(t, lock.value, b.value(t, "lock.k"))

		require.NoError(t, holder.Release(ctx), "the release was applied: called again, it says so")
		assert.Equal(t, lock.value, b.value(t, "lock.k"), "and leaves the waiter's lease alone")
		_, err = b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "nobody else gets in")
		require.NoError(t, lock.Release(ctx))
	})
}
