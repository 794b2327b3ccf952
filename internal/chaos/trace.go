package chaos

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// What a client learns about its own Acquire calls from the commands
// they send: when the winning command went out (the token-order check
// needs it) and whether a write may have been applied without its reply
// (a write in doubt).

// callKey is the context key of an Acquire call's trace.
type callKey struct{}

// callTrace is what the client hook learns about one Acquire call from
// the commands sent under its context.
type callTrace struct {
	sent  atomic.Int64 // when it last sent a command that can win a lock (Unix ns)
	doubt atomic.Bool  // a command that can write the key failed without a reply
	wins  atomic.Int32 // Campaign: how often its Acquire won inside the call (leaderRead)

	// In a semaphore run (traceHook.keys set), the lock keys its writes in
	// doubt named: a semaphore's call writes to every permit key, and a
	// write in doubt may have left a lease on the keys it names only.
	mu        sync.Mutex
	doubtKeys map[string]bool
	doubtAll  bool // a write in doubt named no lock key: any may hold its lease
}

// doubted records a write in doubt that named the given lock keys (none:
// any lock key).
func (t *callTrace) doubted(keys []string) {
	t.doubt.Store(true)
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(keys) == 0 {
		t.doubtAll = true
	}
	for _, k := range keys {
		if t.doubtKeys == nil {
			t.doubtKeys = map[string]bool{}
		}
		t.doubtKeys[k] = true
	}
}

// doubtOn reports whether a write in doubt of the call may have left a
// lease on key.
func (t *callTrace) doubtOn(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.doubtAll || t.doubtKeys[key]
}

// doubtList is the protocol's list of the keys the call's writes in doubt
// named (the doubts request): "*" for any, "-" for none.
func (t *callTrace) doubtList() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.doubtAll:
		return doubtAny
	case len(t.doubtKeys) == 0:
		return "-"
	}
	keys := make([]string, 0, len(t.doubtKeys))
	for k := range t.doubtKeys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// doubtAny, in a list of the keys a call's writes in doubt named, stands
// for every key.
const doubtAny = "*"

// parseDoubtList is doubtList's other side: the keys, or [doubtAny]; an
// empty list for none.
func parseDoubtList(list string) []string {
	if list == "-" {
		return []string{}
	}
	return strings.Split(list, ",")
}

// doubtsOn reports whether a call whose writes in doubt named the keys on
// may have left a lease on key; on is nil when the call did not say
// which, and then inDoubt, whether any did, decides.
func doubtsOn(inDoubt bool, on []string, key string) bool {
	if on == nil {
		return inDoubt
	}
	return slices.Contains(on, doubtAny) || slices.Contains(on, key)
}

// leaderRead reports whether cmd is Campaign's read of an election's
// record: publish sends it once for each lock its Acquire won, before it
// writes the record (setnxlock.LeaderKey names the record "<name>.leader").
func leaderRead(cmd redis.Cmder) bool {
	if cmd.Name() != "get" || len(cmd.Args()) != 2 {
		return false
	}
	key, _ := cmd.Args()[1].(string)
	return strings.HasSuffix(key, ".leader")
}

// sentAt is when the call last sent a command that can win a lock, or
// fallback if it sent none.
func (t *callTrace) sentAt(fallback time.Time) time.Time {
	if n := t.sent.Load(); n != 0 && n <= fallback.UnixNano() {
		return time.Unix(0, n)
	}
	return fallback
}

// inDoubt reports whether a command or transaction that failed with err
// may have been applied all the same: it got no reply at all, as opposed
// to an error reply or a nil.
func inDoubt(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// readOnly lists the commands an attempt sends that never write its key.
var readOnly = map[string]bool{"get": true, "ping": true, "hello": true, "auth": true, "client": true, "subscribe": true, "cluster": true, "command": true}

// traceHook fills the trace (callKey) of the Acquire call whose context a
// command carries: when it sent a command that can win a lock — a
// pipeline or transaction (the fenced SETNX, the watched takeover), a
// script (the one-round-trip path), or a bare SETNX — and whether one of
// its writes may have been applied without its reply reaching the
// Locker. Read when Acquire returns, the first is when the winning command
// was sent: a lower bound of the instant the lock was won, which the
// token-order check needs. The PEXPIRE that follows a win is not counted,
// since it is sent after it. A command sent under a context that has
// already ended is never sent, so never in doubt.
//
// A write is in doubt when it failed without a reply, and also when it
// took longer than retried: go-redis retries a command whose reply timed
// out inside the call this hook wraps, so a SETNX applied by its first
// try and answered 0 by its retry looks like a plain refusal here. With
// a token the Locker recognises its own value on the next read (H5); a
// bare timestamp is nobody's in particular, so its writer waits out its
// own lease, and that lease must count as in doubt, not as a free wait
// (seen in formats mode: a 988ms wait on a UnixSeconds value its own
// waiter had written).
type traceHook struct {
	retried time.Duration // a command that took this long may have been sent twice; 0: never retried
	// keys, when set (a semaphore run), are the run's lock keys: a write
	// in doubt is recorded against those it names (callTrace.doubted).
	keys map[string]bool
}

// named lists the lock keys (h.keys) that cmds name.
func (h traceHook) named(cmds ...redis.Cmder) []string {
	var out []string
	for _, cmd := range cmds {
		for _, arg := range cmd.Args() {
			if s, ok := arg.(string); ok && h.keys[s] && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// retriedAfter is how long a command takes at least when go-redis retried
// it: a read timeout.
func retriedAfter(cfg WorkerConfig) time.Duration {
	if cfg.MaxRetries < 0 {
		return 0
	}
	return cfg.ReadTimeout
}

// doubt reports whether a write that returned err after took may have
// been applied unknown to its sender.
func (h traceHook) doubt(err error, took time.Duration) bool {
	return inDoubt(err) || (h.retried > 0 && took >= h.retried)
}

// DialHook, ProcessHook and ProcessPipelineHook make traceHook a
// redis.Hook.
func (traceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h traceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		trace, _ := ctx.Value(callKey{}).(*callTrace)
		if trace == nil {
			return next(ctx, cmd)
		}
		start := time.Now()
		switch cmd.Name() {
		case "eval", "evalsha", "setnx", "msetnx": // the commands that can win a lock on their own (MSETNX: a group, multi.go)
			trace.sent.Store(start.UnixNano())
		}
		if leaderRead(cmd) {
			trace.wins.Add(1)
		}
		sent := ctx.Err() == nil
		err := next(ctx, cmd)
		if sent && !readOnly[cmd.Name()] && h.doubt(err, time.Since(start)) {
			trace.doubted(h.named(cmd))
		}
		return err
	}
}

func (h traceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		trace, _ := ctx.Value(callKey{}).(*callTrace)
		if trace == nil || !writes(cmds) {
			return next(ctx, cmds)
		}
		start := time.Now()
		trace.sent.Store(start.UnixNano())
		sent := ctx.Err() == nil
		err := next(ctx, cmds)
		if sent && h.doubt(err, time.Since(start)) {
			trace.doubted(h.named(cmds...))
		}
		return err
	}
}

// writes reports whether a pipeline holds a command that can write: not
// the setup of a new connection (HELLO, AUTH, CLIENT), which go-redis
// sends as a pipeline under the context of the call that dialled, and
// which once stamped a fencing Acquire's win 545ms late, after a SIGSTOP
// (a wake-up subscription dialled under the Acquire's context), so that
// the token-order check took a token drawn before the stop for one drawn
// after it.
func writes(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if !readOnly[cmd.Name()] {
			return true
		}
	}
	return false
}
