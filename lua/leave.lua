-- leave.lua: a queued waiter leaves the queue without the lock (queue.go).
-- Prefixed with handon.lua.
--
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (waitersKey)
-- ARGV[1]  our entry
-- ARGV[2]  our entry's token
-- ARGV[3]  the key's wake channel, or '' for none
-- ARGV[4]  our clock in Unix µs
-- ARGV[5]  the claim window of a handoff, in ms
--
-- Takes our entry off the queue. If the key carries our token (a release
-- handed it to us and we will not claim it, or an attempt of ours whose
-- reply was lost wrote it), it is not to be held by nobody: hand it on to
-- the next waiter, or delete it and wake the key's other waiters. The
-- key is handed on whatever the next waiter's wait: no release is racing
-- for it.
--
-- If the key is free, a release may have let the waiters barge (handOn)
-- and woken us, first in line, to race for it: the next in line is woken
-- instead, so that a free key never waits on a waiter that left.
--
-- Returns 2 handed on, 1 deleted, 0 the key did not carry our token.
redis.pcall('zrem', KEYS[2], ARGV[1])
local current = redis.pcall('get', KEYS[1])
if current == false then
  local head = redis.pcall('zrange', KEYS[2], 0, 0)
  local locker, token
  if type(head) == 'table' and #head == 1 then
    locker, token = string.match(head[1], '^([^:]+):([^:]+)$')
  end
  if locker then redis.pcall('publish', 'setnxlock:handoff:' .. locker, token .. ':' .. KEYS[1]) end
  return 0
end
if type(current) ~= 'string' or string.sub(current, -#ARGV[2] - 1) ~= ':' .. ARGV[2] then return 0 end
if handOn(KEYS[1], KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[5]), 0) == 1 then return 2 end
redis.call('del', KEYS[1])
if ARGV[3] ~= '' then redis.pcall('publish', ARGV[3], KEYS[1]) end
return 1
