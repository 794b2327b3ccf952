package setnxlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// A late request never rolls a lease back (H10, DESIGN.md): any single
// command the library sent, delivered again late (held up in the network
// past the client's ReadTimeout, or the first copy of a go-redis retry),
// leaves the key stating an end no earlier than its holder believes.

// heldPoll holds back, once armed, a client's next queued attempt's first
// write (queued.lua, or the commands' SET NX or SETNX): the request stays
// in the network (it is not sent), and the client sees what go-redis
// reports after its ReadTimeout. The test delivers it later.
type heldPoll struct {
	armed atomic.Bool
	held  chan []any // the held request's arguments
}

func holdPoll(c *redis.Client) *heldPoll {
	h := &heldPoll{held: make(chan []any, 1)}
	c.AddHook(h)
	return h
}

func (h *heldPoll) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *heldPoll) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !stepQueue.sentBy([]redis.Cmder{cmd}) && cmd.Name() != "set" && cmd.Name() != "setnx" || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		h.held <- slices.Clone(cmd.Args())
		cmd.SetErr(errLostReply{})
		return errLostReply{}
	}
}
func (h *heldPoll) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// L1 (issue 28), on every queueing path: a queued waiter's poll, stamped
// with its lease at that moment, is held up past the client's timeout. The waiter then holds with
// a later end (its claim, or a Refresh), and the held poll lands: the key
// carries the waiter's token, and the script used to write the poll's
// older stamp over it. From that older end on a third client took the key
// while the holder still believed its lease: "key states 10s; holder
// believes 14s; a third client holds".
func TestALateQueuedPollNeverRollsTheLeaseBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hold runs once the poll is held: the waiter comes to hold the key
		// with an end 4s past the held poll's.
		hold func(t *testing.T, b *backend, release func(), acquired <-chan *Lock) *Lock
	}{
		{"after the claim", func(t *testing.T, b *backend, release func(), acquired <-chan *Lock) *Lock {
			b.clock.Advance(4 * time.Second)
			release()
			return await.Recv(t, acquired, "the waiter's Acquire, by the handoff")
		}},
		{"after a Refresh", func(t *testing.T, b *backend, release func(), acquired <-chan *Lock) *Lock {
			release()
			lock := await.Recv(t, acquired, "the waiter's Acquire, by the handoff")
			b.clock.Advance(4 * time.Second)
			require.NoError(t, lock.Refresh(ctx, 10*time.Second))
			return lock
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
				holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				client := b.client(t)
				held := holdPoll(client)
				w := b.lockerOn(t, client, path)
				warm(t, w)
				acquired := acquireInBackground(t, w, "lock.k")
				b.queued(t, "lock.k", 1)
				held.armed.Store(true)
				poll := await.Recv(t, held.held, "the waiter's next poll")

				lock := tc.hold(t, b, func() { require.NoError(t, holder.Release(ctx)) }, acquired)
				require.NotNil(t, lock)
				require.Equal(t, b.start.Add(14*time.Second), lock.ExpiresAt())

				_ = b.raw.Do(ctx, poll...).Err() // the held poll lands
				states, err := parseExpiry(b.value(t, "lock.k"))
				require.NoError(t, err)
				assert.False(t, states.Before(lock.ExpiresAt()), "key states %v; holder believes %v",
					states.Sub(b.start), lock.ExpiresAt().Sub(b.start))
				b.clock.Set(b.start.Add(12 * time.Second))
				_, err = b.locker(t, path).TryAcquire(ctx, "lock.k")
				assert.ErrorIs(t, err, ErrNotAcquired, "a third client holds while the holder believes it holds until 14s")
				assert.NoError(t, lock.Err())
			})
		})
	}
}

// writeLog records every write a client sends, so that a test can deliver
// a late copy of each after later writes. How a copy arrives late:
//   - A command or a script, sent alone or in a plain pipeline, is
//     delivered again as it was sent: the first copy of a go-redis retry,
//     or a request held up past the ReadTimeout, runs as it was.
//   - A MULTI…EXEC runs on the connection that sent its WATCH, and no
//     other: go-redis never resends it elsewhere, and a network delivers
//     nothing twice on one connection. Late, it runs only if no write
//     touched its watched keys since its WATCH. So the log WATCHes the
//     same keys on a connection of its own at the moment the client sends
//     its WATCH, and delivers the transaction late on that connection,
//     once: the server aborts it exactly when it would abort the late
//     original. (Replaying it on another connection without the WATCH
//     would be a write the network cannot produce.) A MULTI…EXEC sent
//     without a WATCH is delivered again as it was sent.
type writeLog struct {
	t   *testing.T
	raw *redis.Client

	mu       sync.Mutex
	writes   []*loggedWrite
	watching *redis.Conn // WATCHes what the client's open transaction watches
}

type loggedWrite struct {
	cmds      [][]any
	watched   *redis.Conn // for a watched transaction: where its late copy runs
	delivered bool        // a watched transaction arrives late once
}

func (w *loggedWrite) String() string {
	var names []string
	for _, args := range w.cmds {
		name := fmt.Sprint(args[0])
		if name == "evalsha" {
			name += "(" + scriptNames[fmt.Sprint(args[1])] + ")"
		}
		names = append(names, name)
	}
	if len(w.cmds) > 1 || w.watched != nil {
		return "MULTI " + strings.Join(names, " ") + " EXEC"
	}
	return names[0]
}

// reads are the commands that write nothing; connection setup among them.
var reads = map[string]bool{
	"get": true, "zscore": true, "zrange": true, "pttl": true, "ttl": true, "exists": true, "ping": true,
	"time": true, "hello": true, "client": true, "auth": true, "select": true, "script": true, "info": true,
	"wait": true, "subscribe": true, "unsubscribe": true,
}

func logWrites(t *testing.T, b *backend, c *redis.Client) *writeLog {
	w := &writeLog{t: t, raw: b.raw}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, lw := range w.writes {
			if lw.watched != nil {
				_ = lw.watched.Close()
			}
		}
		if w.watching != nil {
			_ = w.watching.Close()
		}
	})
	c.AddHook(w)
	return w
}

// note logs cmds, sent alone or in a pipeline that is not a transaction.
func (w *writeLog) note(cmds ...redis.Cmder) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cmd := range cmds {
		switch name := cmd.Name(); {
		case name == "watch":
			if w.watching != nil {
				_ = w.watching.Close()
			}
			w.watching = w.raw.Conn()
			require.NoError(w.t, w.watching.Do(ctx, cmd.Args()...).Err())
		case name == "unwatch" && w.watching != nil:
			_ = w.watching.Close()
			w.watching = nil
		case !reads[name] && name != "unwatch":
			w.writes = append(w.writes, &loggedWrite{cmds: [][]any{slices.Clone(cmd.Args())}})
		}
	}
}

// noteTransaction logs a MULTI…EXEC, with the WATCH open for it if any.
func (w *writeLog) noteTransaction(cmds []redis.Cmder) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lw := &loggedWrite{watched: w.watching}
	w.watching = nil
	for _, cmd := range cmds[1 : len(cmds)-1] {
		lw.cmds = append(lw.cmds, slices.Clone(cmd.Args()))
	}
	w.writes = append(w.writes, lw)
}

func (w *writeLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (w *writeLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w.note(cmd)
		return next(ctx, cmd)
	}
}
func (w *writeLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch {
		case isTransactionCheck(cmds):
		case len(cmds) > 1 && cmds[0].Name() == "multi":
			w.noteTransaction(cmds)
		default:
			w.note(cmds...)
		}
		return next(ctx, cmds)
	}
}

// sent returns the writes logged so far.
func (w *writeLog) sent() []*loggedWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// deliverLate delivers a late copy of lw (see writeLog). Its reply goes
// nowhere: the client gave up on it.
func (w *writeLog) deliverLate(lw *loggedWrite) {
	queue := func(pipe redis.Pipeliner) error {
		for _, args := range lw.cmds {
			_ = pipe.Do(ctx, args...)
		}
		return nil
	}
	switch {
	case lw.watched != nil:
		if !lw.delivered {
			lw.delivered = true
			_, _ = lw.watched.TxPipelined(ctx, queue)
		}
	case len(lw.cmds) == 1:
		_ = w.raw.Do(ctx, lw.cmds[0]...).Err()
	default:
		_, _ = w.raw.TxPipelined(ctx, queue)
	}
}

// keyState is a lock key and its queue, to put back after a late copy, so
// that each copy is judged on its own.
type keyState struct {
	value string
	ttl   time.Duration
	queue []redis.Z
	qttl  time.Duration
}

func (b *backend) keyState(t *testing.T, key string) keyState {
	t.Helper()
	s := keyState{value: b.value(t, key), ttl: b.raw.PTTL(ctx, key).Val()}
	s.queue = b.raw.ZRangeWithScores(ctx, waitersKey(key), 0, -1).Val()
	s.qttl = b.raw.PTTL(ctx, waitersKey(key)).Val()
	return s
}

func (b *backend) putBack(t *testing.T, key string, s keyState) {
	t.Helper()
	require.NoError(t, b.raw.Del(ctx, key, waitersKey(key)).Err())
	if s.value != "<missing>" {
		require.NoError(t, b.raw.Set(ctx, key, s.value, max(s.ttl, 0)).Err())
	}
	if len(s.queue) > 0 {
		require.NoError(t, b.raw.ZAdd(ctx, waitersKey(key), s.queue...).Err())
		if s.qttl > 0 {
			require.NoError(t, b.raw.PExpire(ctx, waitersKey(key), s.qttl).Err())
		}
	}
}

// lateCopiesLeaveTheLease delivers a late copy of every write in log, each
// on its own, and checks that the key still holds lock's lease: it carries
// lock's token, states an end no earlier than lock believes, and Redis
// keeps it at least that long (H6).
func lateCopiesLeaveTheLease(t *testing.T, b *backend, log *writeLog, key string, lock *Lock, when string) {
	t.Helper()
	writes := log.sent()
	require.NotEmpty(t, writes)
	for i, lw := range writes {
		before := b.keyState(t, key)
		log.deliverLate(lw)
		value := b.value(t, key)
		what := fmt.Sprintf("%s, a late copy of write %d (%v)", when, i, lw)
		if !assert.Equal(t, lock.token, tokenOf(value), "%s: the key %q is no longer the holder's", what, value) {
			b.putBack(t, key, before)
			continue
		}
		states, err := parseExpiry(value)
		require.NoError(t, err)
		believes := lock.ExpiresAt()
		assert.False(t, states.Before(believes), "%s: the key states %v; the holder believes %v",
			what, states.Sub(b.start), believes.Sub(b.start))
		assert.GreaterOrEqual(t, b.raw.PTTL(ctx, key).Val(), believes.Sub(b.clock.Now()), "%s: Redis ends the key before the lease", what)
		b.putBack(t, key, before)
	}
}

// isHeardClaim reports whether lw is the claim of a handoff heard
// (heard.go): claim.lua, or the command transport's watched claim (SET
// with ZREM, no PUBLISH).
func isHeardClaim(lw *loggedWrite) bool {
	names := map[string]bool{}
	for _, args := range lw.cmds {
		name := fmt.Sprint(args[0])
		if name == "evalsha" && scriptNames[fmt.Sprint(args[1])] == "claim" {
			return true
		}
		names[name] = true
	}
	return lw.watched != nil && names["set"] && names["zrem"] && !names["publish"]
}

// pollsUntil waits until the waiter whose writes log records has sent n
// writes in all: it polled again.
func pollsUntil(t *testing.T, log *writeLog, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(log.sent()) >= n }, await.Timeout, time.Millisecond, "the waiter's next poll")
}

// The replay test of issue 28: on every queueing path and backend, a
// waiter wins by a handoff (its claim sent in the background, heard.go,
// or by its poll if that comes first), refreshes, renews, releases (a
// late copy of that claim after the Refresh finds a later end of its own
// wait and writes nothing, H10);
// waits again and wins by a poll once a classic client frees the key, and
// refreshes for longer than TTL + grace; waits again and takes an expired
// lease over. At each step every write it sent so far is delivered late,
// and the key must still state the holder's lease; once released, a late
// copy must leave the successor's lease alone. Successors hold for a minute, longer than
// the waiter's TTL + grace: a late write of the waiter's safety net (H6)
// must not cut their lease, nor the waiter's own after its long Refresh.
func TestALateCopyOfAnyWriteNeverRollsALeaseBack(t *testing.T) {
	const key = "lock.k"
	for _, p := range queueingPaths {
		t.Run(p.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				client := b.client(t)
				w := b.lockerOn(t, client, p.opt, WithAutoRefresh())
				warm(t, w)
				log := logWrites(t, b, client)
				others := b.locker(t, p.opt)
				successors := b.locker(t, p.opt, WithTTL(time.Minute))

				// waitThenWin queues w on key while free stands in the way,
				// with polls stamped at two instants, and returns its Lock.
				waitThenWin := func(free func()) *Lock {
					acquired := acquireInBackground(t, w, key)
					b.queued(t, key, 1)
					pollsUntil(t, log, len(log.sent())+1)
					b.clock.Advance(time.Second)
					pollsUntil(t, log, len(log.sent())+1)
					b.clock.Advance(time.Second)
					free()
					return await.Recv(t, acquired, "the waiter's Acquire")
				}
				releaseThenSucceed := func(lock *Lock, how string) {
					require.NoError(t, lock.Release(ctx))
					successor, err := successors.TryAcquire(ctx, key)
					require.NoError(t, err)
					lateCopiesLeaveTheLease(t, b, log, key, successor, "after a release, on the successor's lease ("+how+")")
					require.NoError(t, successor.Release(ctx), "the successor still holds its lease")
				}

				holder, err := others.TryAcquire(ctx, key)
				require.NoError(t, err)
				lock := waitThenWin(func() { require.NoError(t, holder.Release(ctx)) })
				if !slices.ContainsFunc(log.sent(), isHeardClaim) {
					// Its poll came first and claimed the key handed to it
					// (queued.lua, or the watched claim after its pipeline):
					// that claim is replayed instead.
					t.Logf("won by the poll's claim, not the heard one: %v", log.sent())
				}
				lateCopiesLeaveTheLease(t, b, log, key, lock, "won by a handoff")
				b.clock.Advance(2 * time.Second)
				require.NoError(t, lock.Refresh(ctx, 10*time.Second))
				lateCopiesLeaveTheLease(t, b, log, key, lock, "after a Refresh")
				refreshed := lock.ExpiresAt()
				b.clock.Advance(4 * time.Second)
				require.Eventually(t, func() bool { return lock.ExpiresAt().After(refreshed) }, await.Timeout, time.Millisecond, "a renewal")
				lateCopiesLeaveTheLease(t, b, log, key, lock, "after a renewal")
				releaseThenSucceed(lock, "handoff")

				b.set(t, key, strconv.FormatInt(b.clock.Now().Add(time.Hour).UnixMilli(), 10)) // a classic client's lease, in ms
				lock = waitThenWin(func() { require.NoError(t, b.raw.Del(ctx, key).Err()) })
				lateCopiesLeaveTheLease(t, b, log, key, lock, "won by a poll")
				require.NoError(t, lock.Refresh(ctx, time.Minute))
				lateCopiesLeaveTheLease(t, b, log, key, lock, "won by a poll, after a Refresh longer than TTL + grace")
				releaseThenSucceed(lock, "poll")

				b.set(t, key, strconv.FormatInt(b.clock.Now().Add(1500*time.Millisecond).UnixMilli(), 10)) // over by the second poll
				lock = waitThenWin(func() {})
				if p.name == "scripts" {
					assert.Contains(t, fmt.Sprint(log.sent()), "evalsha(takeover)", "the replay covers the takeover script")
				}
				lateCopiesLeaveTheLease(t, b, log, key, lock, "won by a takeover")
				releaseThenSucceed(lock, "takeover")
			})
		})
	}
}

// H10 and H6 on every path: the reply of the write that created the key is
// lost, and the next attempt takes the key as ours (H5) and gives it its
// safety net, which that write may lack. A late copy of any write the
// Locker sent, that net's included, must leave the lease alone after a
// Refresh longer than TTL + grace, and once released, a successor's lease
// of a minute.
func TestALateSafetyNetOfARecognisedWriteNeverCutsALease(t *testing.T) {
	const key = "lock.k"
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		client := b.client(t)
		l := b.lockerOn(t, client, p.opt)
		warm(t, l)
		log := logWrites(t, b, client)
		loseReply(client, p.acquire)

		_, err := l.TryAcquire(ctx, key)
		require.Error(t, err)
		lock, err := l.TryAcquire(ctx, key)
		require.NoError(t, err, "our own lease, recognised")
		lateCopiesLeaveALongRefreshAndTheSuccessor(t, b, log, key, lock, p)
	})
}

// H10 with WithReplicas: the write that lets WAIT count our lease (a
// PEXPIRE of its net) goes out after every grant and renewal. A late copy
// of it must leave a Refresh longer than TTL + grace alone, and, once
// released, a successor's lease of a minute. On every path.
func TestALateReplicaCheckNeverCutsALease(t *testing.T) {
	const key = "lock.replicated"
	r := startReplicated(t)
	b := &backend{name: "redis-server", addr: r.primary.Addr(), start: r.clock.Now(), clock: r.clock}
	b.raw = b.client(t)
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			client := b.client(t)
			l, err := New(client, WithClock(r.clock), WithTTL(10*time.Second), WithReplicas(1, 200*time.Millisecond), p.opt)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			log := logWrites(t, b, client)

			lock, err := l.TryAcquire(ctx, key)
			require.NoError(t, err)
			lateCopiesLeaveALongRefreshAndTheSuccessor(t, b, log, key, lock, p)
		})
	}
}

// lateCopiesLeaveALongRefreshAndTheSuccessor refreshes lock for longer
// than TTL + grace, checks the late copies of every write in log against
// it, then releases it and checks them against a successor of a minute's
// lease on path p.
func lateCopiesLeaveALongRefreshAndTheSuccessor(t *testing.T, b *backend, log *writeLog, key string, lock *Lock, p lockPath) {
	t.Helper()
	require.NoError(t, lock.Refresh(ctx, time.Minute))
	lateCopiesLeaveTheLease(t, b, log, key, lock, "after a Refresh longer than TTL + grace")

	require.NoError(t, lock.Release(ctx))
	successor, err := b.locker(t, p.opt, WithTTL(time.Minute)).TryAcquire(ctx, key)
	require.NoError(t, err)
	lateCopiesLeaveTheLease(t, b, log, key, successor, "after a release, on the successor's lease")
	require.NoError(t, successor.Release(ctx), "the successor still holds its lease")
}
