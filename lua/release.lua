-- release.lua: Release, in one round trip. Prefixed with value.lua,
-- owned.lua, release_alone.lua (the way when nobody waits, which returns
-- before this file when it applies), protocol.lua and handon.lua.
--
-- KEYS[1]    the lock key
-- KEYS[2..]  when ARGV[8] is not '0': its release marker (releasedKey);
--            then, when ARGV[7] is not '': its waiters (waitersKey, or
--            a semaphore's one queue); then, when ARGV[10] is not '':
--            the semaphore's recorded count (PermitsKey)
-- ARGV[1..4] the queue's encodings (protocol.lua)
-- ARGV[5]    the key's wake channel, or '' for none
-- ARGV[6]    the releaser's clock in Unix µs
-- ARGV[7]    '' not to hand the key to a queued waiter; else the
--            starvation threshold in µs (handOn's barge), '0' to hand it
--            over whatever the wait
-- ARGV[8]    how long to remember this release, in ms (the rest of our
--            lease), or '0' not to; only a release of bare values
--            remembers itself (forcetrace.go)
-- ARGV[9]    our owner token, or '' when our values carry none
-- ARGV[10]   for a permit of a semaphore's one queue: its index, handed
--            on only while below the recorded count (handOn); else ''
-- ARGV[11]   without a token: this release's own id, fresh for each run
--            the client makes (go-redis resends it unchanged)
-- ARGV[12..] without a token: the exact values that are ours
--
-- Only if the key is ours (H3), it hands the key to the first queued
-- waiter that hears of it (handOn), or else deletes it and wakes the key's
-- other waiters (and, when handOn let the waiters barge, the first in
-- line). When it hands over, it publishes on the wake channel only if the
-- queue held anyone: waits on wake-ups list themselves in the queue as
-- listeners (protocol.go), so an uncontended release publishes nothing. go-redis sends a script again when its reply was lost; the
-- second run finds the key no longer ours, even if the key has had other
-- holders since. With a token the caller takes that for its own release
-- (H5; forcetrace.go): nothing is remembered. Without a token the release
-- remembers this run's id for the rest of our lease, in a sorted set
-- scored by the instant until which each is remembered, and the second
-- run looks for its id first: by then another holder may have written the
-- very same bare timestamp (the same second), which the owner check would
-- take for ours and delete (H3).
--
-- Returns {2, ''}     handed to a waiter
--         {1, error}  deleted; error is why a handoff failed, or ''
--         {0, ''}     the key is not ours
--         {3, ''}     an earlier run of this release already released it
local marker, waiters
local index = 2
if ARGV[8] ~= '0' then
  marker = KEYS[index]
  index = index + 1
end
local count, permit
if ARGV[7] ~= '' then
  waiters = KEYS[index]
  if ARGV[10] ~= '' then count, permit = KEYS[index + 1], tonumber(ARGV[10]) end
end
local now = math.floor(tonumber(ARGV[6]) / 1000) -- ms, for the marker

-- what this release remembers itself by: our token, or its own id
local member = ARGV[9]
if member == '' then member = ARGV[11] end

local function remembered()
  if not marker then return false end
  return type(redis.pcall('zscore', marker, member)) == 'string'
end

if ARGV[9] == '' and remembered() then return {3, ''} end
local current = redis.pcall('get', KEYS[1])
if type(current) ~= 'string' or not owned(current) then
  if remembered() then return {3, ''} end
  return {0, ''}
end

local function remember()
  if not marker then return end
  redis.pcall('zremrangebyscore', marker, '-inf', now)
  redis.pcall('zadd', marker, now + tonumber(ARGV[8]), member)
  local ttl = redis.pcall('pttl', marker)
  if type(ttl) ~= 'number' or ttl < tonumber(ARGV[8]) then
    redis.pcall('pexpire', marker, ARGV[8])
  end
end

local failed = ''
local wake = ARGV[5] ~= '' -- a release that does not hand over always wakes
if waiters then
  local handed, err, woke = handOn(KEYS[1], waiters, tonumber(ARGV[6]), tonumber(ARGV[7]), count, permit)
  wake = wake and woke -- only if the queue held anyone, a listener included
  if handed == 1 then
    if wake then redis.pcall('publish', ARGV[5], KEYS[1]) end
    remember()
    return {2, ''}
  end
  if handed == -1 then failed = err end
end
redis.call('del', KEYS[1])
if wake then redis.pcall('publish', ARGV[5], KEYS[1]) end
remember()
return {1, failed}
