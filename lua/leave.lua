-- leave.lua: a queued waiter leaves the queue without the lock (queue.go).
-- Prefixed with handon.lua.
--
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (waitersKey)
-- ARGV[1]  our entry
-- ARGV[2]  our entry's token
-- ARGV[3]  the key's wake channel, or '' for none
-- ARGV[4]  our clock in Unix ms
-- ARGV[5]  the claim window of a handoff, in ms
--
-- Takes our entry off the queue. If the key carries our token (a release
-- handed it to us and we will not claim it, or an attempt of ours whose
-- reply was lost wrote it), it is not to be held by nobody: hand it on to
-- the next waiter, or delete it and wake the key's other waiters.
--
-- Returns 2 handed on, 1 deleted, 0 the key did not carry our token.
redis.pcall('zrem', KEYS[2], ARGV[1])
local current = redis.pcall('get', KEYS[1])
if type(current) ~= 'string' or string.sub(current, -#ARGV[2] - 1) ~= ':' .. ARGV[2] then return 0 end
if handOn(KEYS[1], KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[5])) == 1 then return 2 end
redis.call('del', KEYS[1])
if ARGV[3] ~= '' then redis.pcall('publish', ARGV[3], KEYS[1]) end
return 1
