package setnxlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The scripted fast path: where the server runs Lua, an attempt's first
// step (SETNX, the safety net, the fencing token, or the GET of the
// holder's value) and a release (compare-and-delete and the wake-up) each
// take one round trip instead of two. Scripts do the very same steps as the
// command path, atomically; correctness never depends on them. A Locker
// whose server refuses scripts (ACL without @scripting, scripting disabled,
// a proxy without EVAL) falls back to the commands for good.

// acquireScript: KEYS[1] the lock key, KEYS[2] its fence counter (with
// fencing) or its waiters' queue (for a queued attempt, handoff.go);
// ARGV[1] our value, ARGV[2] the safety net in ms (H6), ARGV[3] our queue
// entry or ” when not queued, ARGV[4] our owner token, ARGV[5] '1' when an
// earlier attempt may have queued the entry already.
// It returns {1, token} when SETNX created the key, {0, value} with the
// holder's value otherwise (a queued attempt is then in the queue, unless
// the value is already the one handed to it), {3, value} when the queue
// was refused, and {2} when the key is not a string (H7).
var acquireScript = redis.NewScript(`
local queued = ARGV[3] ~= ''
if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  if queued then
    if ARGV[5] == '1' then redis.pcall('lrem', KEYS[2], 0, ARGV[3]) end
    return {1, 0}
  end
  if KEYS[2] then return {1, redis.call('incr', KEYS[2])} end
  return {1, 0}
end
local current = redis.pcall('get', KEYS[1])
if type(current) ~= 'string' then return {2} end
if queued and string.sub(current, -#ARGV[4] - 1) ~= ':' .. ARGV[4] then
  if ARGV[5] == '1' then redis.pcall('lrem', KEYS[2], 0, ARGV[3]) end
  local length = redis.pcall('rpush', KEYS[2], ARGV[3])
  if type(length) ~= 'number' then return {3, current} end
  redis.pcall('pexpire', KEYS[2], ARGV[2])
end
return {0, current}
`)

// releaseScript: KEYS[1] the lock key, KEYS[2] its waiters' queue (when
// handing over); ARGV[1] how ownership is decided ('t': the value carries
// the token ARGV[5]; 'v': the value is one of ARGV[5..]; 'a': anything,
// only in the broken-owner-check build); ARGV[2] the wake-up channel, or
// ” for none; ARGV[3] the releaser's clock in Unix ms, or ” not to hand
// over; ARGV[4] a queue entry to remove first (a waiter leaving), or ”.
//
// Only if the key is ours (H3) it hands the key to the first queued waiter
// whose Locker hears the PUBLISH of its new value, and returns 2; when no
// waiter hears, it deletes the key, wakes the key's other waiters and
// returns 1. It returns 0 when the key is not ours. Every PUBLISH, and
// every use of the queue, is a pcall: a user allowed no channels or no
// queue still releases.
var releaseScript = redis.NewScript(`
if ARGV[4] ~= '' then redis.pcall('lrem', KEYS[2], 0, ARGV[4]) end
local current = redis.pcall('get', KEYS[1])
if type(current) ~= 'string' then return 0 end
local owned = ARGV[1] == 'a'
if ARGV[1] == 't' then
  local colon = string.find(current, ':', 1, true)
  owned = colon ~= nil and string.sub(current, colon + 1) == ARGV[5]
elseif ARGV[1] == 'v' then
  for i = 5, #ARGV do
    if current == ARGV[i] then owned = true end
  end
end
if not owned then return 0 end
if ARGV[3] ~= '' then
  while true do
    local waiter = redis.pcall('lpop', KEYS[2])
    if type(waiter) ~= 'string' then break end
    local lease, net, locker, token = string.match(waiter, '^(%d+):(%d+):([^:]+):(.+)$')
    if lease then
      local value = string.format('%.0f', tonumber(ARGV[3]) + tonumber(lease)) .. ':' .. token
      local heard = redis.pcall('publish', 'setnxlock:handoff:' .. locker, value)
      if type(heard) == 'number' and heard > 0 then
        redis.call('set', KEYS[1], value, 'px', net)
        return 2
      end
    end
  end
end
redis.call('del', KEYS[1])
if ARGV[2] ~= '' then redis.pcall('publish', ARGV[2], KEYS[1]) end
return 1
`)

// featureSwitch remembers whether a Locker may still use an optional
// feature of the server: scripts, SET's NX and PX options, pub/sub.
type featureSwitch struct{ off atomic.Bool }

func (s *featureSwitch) usable() bool { return !s.off.Load() }

// fallBackIfRefused turns the feature off for good when err says the
// server will never allow it, and reports whether it did. A refused command
// did not run, so the caller may take the classic path at once.
func (s *featureSwitch) fallBackIfRefused(err error) bool {
	if !refused(err) {
		return false
	}
	s.off.Store(true)
	return true
}

// refused recognises the replies of servers, proxies and ACL users that do
// not allow a command or an option: NOPERM, unknown commands, syntax errors
// of servers older than an option, scripting disabled. Inside a transaction
// the refused command's own error comes first (withCause), so an EXECABORT
// caused by LOADING during a restart is not mistaken for one. NOSCRIPT is
// not one of them: go-redis answers it by sending the script itself with
// EVAL.
func refused(err error) bool {
	var redisErr redis.Error
	if !errors.As(err, &redisErr) {
		return false
	}
	msg := redisErr.Error()
	if strings.HasPrefix(msg, "NOPERM") {
		return true
	}
	lower := strings.ToLower(msg)
	for _, refusal := range []string{"unknown command", "syntax error", "wrong number of arguments", "scripting", "unsupported", "not supported", "disabled"} {
		if strings.Contains(lower, refusal) {
			return true
		}
	}
	return false
}

// scriptedClaim is an attempt's first step as one script; entry is nil
// unless the attempt queues.
func (l *Locker) scriptedClaim(ctx context.Context, key string, ours lease, entry *queueEntry) (claim, error) {
	keys := []string{key}
	args := []any{ours.value, l.safetyNet(ours.length()).Milliseconds(), "", "", ""}
	switch {
	case entry != nil:
		keys = append(keys, waitersKey(key))
		args[2], args[3] = entry.member, entry.token
		if entry.pushed {
			args[4] = "1"
		}
	case l.cfg.fencing:
		keys = append(keys, FenceKey(key))
	}
	reply, err := acquireScript.Run(ctx, l.client, keys, args...).Slice()
	if err != nil {
		return claim{}, err
	}
	if len(reply) == 0 {
		return claim{}, errors.New("setnxlock: empty reply from the acquire script")
	}
	switch outcome, _ := reply[0].(int64); {
	case outcome == 1 && len(reply) == 2:
		token, _ := reply[1].(int64)
		return claim{created: true, fencingToken: token}, nil
	case outcome == 3 && len(reply) == 2:
		l.handoff.off.Store(true) // the queue key is refused: wait as before from now on
		fallthrough
	case outcome == 0 && len(reply) == 2:
		current, _ := reply[1].(string)
		return claim{current: current, found: true}, nil
	case outcome == 2:
		return claim{}, ErrNotLockValue
	}
	return claim{}, errors.New("setnxlock: unexpected reply from the acquire script")
}

// scriptedRelease deletes key if it holds a value of lock's, or hands it
// to the next queued waiter, and wakes the key's waiters, in one script.
func (l *Locker) scriptedRelease(ctx context.Context, k *Lock) (bool, error) {
	switch {
	case !ownerCheck:
		return l.runRelease(ctx, k.key, "a", "")
	case k.token != "":
		return l.runRelease(ctx, k.key, "t", "", k.token)
	default:
		return l.runRelease(ctx, k.key, "v", "", append([]string{k.value}, k.maybe...)...)
	}
}

// runRelease runs the release script on key with ownership decided by mode
// and owners, after taking the queue entry leaving (if any) off the queue.
func (l *Locker) runRelease(ctx context.Context, key, mode, leaving string, owners ...string) (bool, error) {
	keys := []string{key}
	channel, now := "", ""
	if l.wakeups.usable() {
		channel = WakeChannel(key)
	}
	if l.handsOver() || leaving != "" {
		keys = append(keys, waitersKey(key))
		now = strconv.FormatInt(l.cfg.clock.Now().UnixMilli(), 10)
	}
	args := make([]any, 0, 4+len(owners))
	args = append(args, mode, channel, now, leaving)
	for _, owner := range owners {
		args = append(args, owner)
	}
	n, err := releaseScript.Run(ctx, l.client, keys, args...).Int64()
	return n > 0, err
}
