-- takeover.lua: the takeover of an expired lease (the SETNX page's step 3),
-- in one round trip: the very step of the watched transaction (deadlock.go),
-- done atomically by the server instead of under WATCH.
--
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (a queued wait only): the wait's entry leaves them
-- KEYS[3]  with fencing only: the key's fence counter (FenceKey); KEYS[2]
--          is then the waiters key or, for an unqueued attempt, the lock
--          key again, unused (a placeholder in the key's own Cluster slot)
-- ARGV[1]  the value the attempt judged expired
-- ARGV[2]  our value
-- ARGV[3]  the safety net in ms: our lease plus the grace (H6)
-- ARGV[4]  a queued wait's entry, "<Locker id>:<token>", or ''
--
-- Returns {1, token, ''}     the key held ARGV[1] and now holds our value
--                            with its safety net; token is the fencing
--                            token drawn with it, or 0 without fencing
--         {1, token, error}  the same, but taking the entry off the queue
--                            failed
--         {0}                the key no longer holds ARGV[1] (taken over by
--                            someone else, released, rewritten): nothing is
--                            written, the caller looks again (H1, H2: a
--                            loser writes nothing; H10: a late copy finds a
--                            later value, or none, and writes nothing)
--         {2}                the key is not a string (H7); left untouched
--         {3}                the fence counter is not an integer (H7):
--                            nothing is written, the counter left untouched
local current = redis.pcall('get', KEYS[1])
if type(current) == 'table' then return {2} end
if current ~= ARGV[1] then return {0} end
local token = 0
if KEYS[3] then
  token = redis.pcall('incr', KEYS[3])
  if type(token) ~= 'number' then return {3} end
end
-- Never DEL-then-SETNX (H1): the value is replaced only while it is the
-- one judged expired, in this same atomic step.
redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[3])
if ARGV[4] ~= '' then
  local removed = redis.pcall('zrem', KEYS[2], ARGV[4])
  if type(removed) == 'table' then return {1, token, removed.err} end
end
return {1, token, ''}
