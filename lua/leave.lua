-- leave.lua: a queued waiter leaves the queue without the lock (protocol.go).
-- Prefixed with value.lua, protocol.lua and handon.lua.
--
-- KEYS[1]    the lock key
-- KEYS[2]    its waiters (waitersKey, or a semaphore's one queue)
-- KEYS[3]    when ARGV[9] is not '': the semaphore's recorded count
-- ARGV[1..4] the queue's encodings (protocol.lua)
-- ARGV[5]    our entry
-- ARGV[6]    our entry's token, which every value written for our entry
--            carries (value.lua's tokenOf)
-- ARGV[7]    the key's wake channel, or '' for none
-- ARGV[8]    our clock in Unix µs
-- ARGV[9]    for a permit of a semaphore's one queue: its index, handed
--            on only while below the recorded count (handOn); else ''
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
redis.pcall('zrem', KEYS[2], ARGV[5])
local current = redis.pcall('get', KEYS[1])
if current == false then
  local head = redis.pcall('zrange', KEYS[2], 0, 0)
  local locker, token
  if type(head) == 'table' and #head == 1 then locker, token = queue.entry(head[1]) end
  if locker then redis.pcall('publish', queue.channel(locker), queue.payload(token, '', KEYS[1])) end
  return 0
end
if type(current) ~= 'string' or tokenOf(current) ~= ARGV[6] then return 0 end
local count, permit
if ARGV[9] ~= '' then count, permit = KEYS[3], tonumber(ARGV[9]) end
local handed, _, woke = handOn(KEYS[1], KEYS[2], tonumber(ARGV[8]), 0, count, permit)
if handed == 1 then
  if woke and ARGV[7] ~= '' then redis.pcall('publish', ARGV[7], KEYS[1]) end -- a listener taken off
  return 2
end
redis.call('del', KEYS[1])
if ARGV[7] ~= '' then redis.pcall('publish', ARGV[7], KEYS[1]) end
return 1
