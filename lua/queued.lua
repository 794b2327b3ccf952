-- queued.lua: the first step of a queued attempt (protocol.go), in one round
-- trip. Prefixed with value.lua.
--
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters: a sorted set of entries, scored by arrival
-- ARGV[1]  our value: our lease by our own clock, carrying our entry's token
-- ARGV[2]  the safety net in ms: our lease plus the grace (H6)
-- ARGV[3]  our entry, "<Locker id>:<token>"
-- ARGV[4]  our entry's token, which every value written for our entry
--          carries (value.lua's tokenOf)
-- ARGV[5]  our clock in Unix µs: our arrival, if we are new to the queue
-- ARGV[6]  the end our value states, in Unix ms
--
-- Returns {1, ''}         the key is ours, holding our value and its safety
--                         net, and our entry is off the queue: SET NX PX
--                         created the key, or the key carried our token
--                         with an earlier end and we claimed it (a release
--                         handed it to us, or an attempt of ours whose
--                         reply was lost wrote it)
--         {1, error}      the same, but taking the entry off failed
--         {0, value}      the key holds someone else's lease; our entry is
--                         in the queue, in the place it took when first
--                         pushed (first come, first served)
--         {2}             the key is not a string (H7); it is left untouched
--         {3, value, error} as 0, but the queue failed (refused by ACL, or
--                         not a sorted set): not queued
--         {4, value}      the key carries our token and states an end no
--                         earlier than ours: nothing is written (H10), our
--                         entry stays where it is
local function dequeue()
  local removed = redis.pcall('zrem', KEYS[2], ARGV[3])
  if type(removed) == 'table' then return {1, removed.err} end
  return {1, ''}
end
if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  return dequeue()
end
local current = redis.pcall('get', KEYS[1])
if type(current) ~= 'string' then return {2} end
local token, ends = tokenOf(current)
if token == ARGV[4] then
  -- H10: every later value of our wait carries our token too (the claim,
  -- a Refresh, renewals), and this write is not watched, so a copy of an
  -- earlier attempt that arrives late must not roll the lease back. A
  -- claim only moves the lease forward: it writes only over an earlier
  -- end, and so never writes the value it found (protocol.go).
  local found = tonumber(ends)
  if found == nil or found >= tonumber(ARGV[6]) then return {4, current} end
  -- Claiming rewrites the lease by our clock, so the releaser's clock
  -- never decides how long we hold, and the safety net is counted from
  -- now (H4, H6).
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
  return dequeue()
end
local place = redis.pcall('zscore', KEYS[2], ARGV[3])
if place == false then
  local last = redis.pcall('zrange', KEYS[2], -1, -1, 'withscores')
  if last.err then return {3, current, last.err} end
  -- Scored by arrival, and after everyone already in line whatever the
  -- clocks: the score tells a release how long we have waited (handOn).
  local score = tonumber(ARGV[5])
  if #last == 2 then score = math.max(score, tonumber(last[2]) + 1) end
  place = redis.pcall('zadd', KEYS[2], score, ARGV[3])
end
if type(place) == 'table' then return {3, current, place.err} end
-- The queue lives as long as the longest safety net of its waiters: a
-- waiter with a short lease must not cut the others' places short. It is
-- refreshed only once it has run down to half of ours: every write to it
-- aborts the watch of a release in progress on the commands
-- (commandqueue.go).
local ttl = redis.pcall('pttl', KEYS[2])
if type(ttl) ~= 'number' or ttl < tonumber(ARGV[2]) / 2 then
  redis.pcall('pexpire', KEYS[2], ARGV[2])
end
return {0, current}
