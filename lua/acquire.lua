-- acquire.lua: the first step of an unqueued attempt, in one round trip.
--
-- KEYS[1]  the lock key
-- KEYS[2]  with fencing only: the key's fence counter (FenceKey)
-- ARGV[1]  our value
-- ARGV[2]  the safety net in ms: our lease plus the grace (H6)
--
-- Returns {1, token}  SETNX created the key; token is the fencing token
--                     drawn with it, or 0 without fencing
--         {0, value}  the key holds value: someone's lease
--         {2}         the key is not a string (H7); it is left untouched
if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  if KEYS[2] then return {1, redis.call('incr', KEYS[2])} end
  return {1, 0}
end
local current = redis.pcall('get', KEYS[1])
if type(current) ~= 'string' then return {2} end
return {0, current}
