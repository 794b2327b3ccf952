-- acquire.lua: the first step of an unqueued attempt, in one round trip.
--
-- KEYS[1]  the lock key
-- KEYS[2]  with fencing only: the key's fence counter (FenceKey)
-- ARGV[1]  our value
-- ARGV[2]  the safety net in ms: our lease plus the grace (H6)
--
-- It runs with fencing, and where the server refuses SET's NX with GET
-- (before Redis 7.0; setget.go sends that one command otherwise).
--
-- Returns {1, token}  SET NX PX created the key with its safety net;
--                     token is the fencing token
--                     drawn with it, or 0 without fencing
--         {0, value}  the key holds value: someone's lease
--         {2}         the key is not a string (H7); it is left untouched
--         {3}         the fence counter is not an integer (H7): nothing is
--                     written, the counter left untouched
if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  local token = 0
  if KEYS[2] then
    token = redis.pcall('incr', KEYS[2])
    if type(token) ~= 'number' then
      redis.call('del', KEYS[1]) -- the win is undone in the same script
      return {3}
    end
  end
  return {1, token}
end
local current = redis.pcall('get', KEYS[1])
if type(current) ~= 'string' then return {2} end
return {0, current}
