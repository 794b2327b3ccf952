package setnxlock

import (
	"context"
	"errors"
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

// acquireScript: KEYS[1] the lock key, KEYS[2] its fence counter (only with
// fencing); ARGV[1] our value, ARGV[2] the safety net in ms (H6).
// It returns {1, token} when SETNX created the key, {0, value} with the
// holder's value otherwise, and {2} when the key is not a string (H7).
var acquireScript = redis.NewScript(`
if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  if KEYS[2] then return {1, redis.call('incr', KEYS[2])} end
  return {1, 0}
end
local current = redis.pcall('get', KEYS[1])
if type(current) ~= 'string' then return {2} end
return {0, current}
`)

// releaseScript: KEYS[1] the lock key; ARGV[1] how ownership is decided
// ('t': the value carries the token ARGV[3]; 'v': the value is one of
// ARGV[3..]; 'a': anything, only in the broken-owner-check build); ARGV[2]
// the wake-up channel, or ” for none. It deletes the key only if it is
// ours (H3) and returns 1 if it did. The PUBLISH is a pcall: a user allowed
// no channels still releases.
var releaseScript = redis.NewScript(`
local current = redis.pcall('get', KEYS[1])
if type(current) ~= 'string' then return 0 end
local owned = ARGV[1] == 'a'
if ARGV[1] == 't' then
  local colon = string.find(current, ':', 1, true)
  owned = colon ~= nil and string.sub(current, colon + 1) == ARGV[3]
elseif ARGV[1] == 'v' then
  for i = 3, #ARGV do
    if current == ARGV[i] then owned = true end
  end
end
if not owned then return 0 end
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

// scriptedClaim is an attempt's first step as one script.
func (l *Locker) scriptedClaim(ctx context.Context, key string, ours lease) (claim, error) {
	keys := []string{key}
	if l.cfg.fencing {
		keys = append(keys, FenceKey(key))
	}
	reply, err := acquireScript.Run(ctx, l.client, keys, ours.value, l.safetyNet(ours.length()).Milliseconds()).Slice()
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
	case outcome == 0 && len(reply) == 2:
		current, _ := reply[1].(string)
		return claim{current: current, found: true}, nil
	case outcome == 2:
		return claim{}, ErrNotLockValue
	}
	return claim{}, errors.New("setnxlock: unexpected reply from the acquire script")
}

// scriptedRelease deletes key if it holds a value of lock's, and wakes the
// key's waiters, in one script.
func (l *Locker) scriptedRelease(ctx context.Context, k *Lock) (bool, error) {
	channel := ""
	if l.wakeups.usable() {
		channel = WakeChannel(k.key)
	}
	args := make([]any, 0, 3+len(k.maybe))
	switch {
	case !ownerCheck:
		args = append(args, "a", channel)
	case k.token != "":
		args = append(args, "t", channel, k.token)
	default:
		args = append(args, "v", channel, k.value)
		for _, v := range k.maybe {
			args = append(args, v)
		}
	}
	n, err := releaseScript.Run(ctx, l.client, []string{k.key}, args...).Int64()
	return n == 1, err
}
