-- claim.lua: the claim of a wait that heard a handoff (heard.go), in one
-- round trip. It only claims: unlike queued.lua it never creates the key
-- and never queues. Prefixed with value.lua.
--
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters: a sorted set of entries, scored by arrival
-- ARGV[1]  our value: our lease by our own clock, carrying our entry's token
-- ARGV[2]  the safety net in ms: our lease plus the grace (H6)
-- ARGV[3]  our entry, "<Locker id>:<token>"
-- ARGV[4]  our entry's token, which every value written for our entry
--          carries (value.lua's tokenOf)
-- ARGV[5]  the end our value states, in Unix ms
--
-- Returns {1, ''}     the key carried our token with an earlier end: it
--                     holds our value and its safety net now, and our
--                     entry is off the queue
--         {1, error}  the same, but taking the entry off failed
--         {0, value}  nothing written: the key holds value (someone
--                     else's, or ours stating an end no earlier than
--                     our claim's: H10, the claim never writes the value
--                     it found)
--         {0}         nothing written: the key is missing, or not a string
local current = redis.pcall('get', KEYS[1])
if type(current) ~= 'string' then return {0} end
local token, ends = tokenOf(current)
if token ~= ARGV[4] then return {0, current} end
-- H10: every later value of our wait carries our token too (a Refresh,
-- renewals), so a copy of this claim that arrives late must not roll the
-- lease back: it writes only over an earlier end.
local found = tonumber(ends)
if found == nil or found >= tonumber(ARGV[5]) then return {0, current} end
-- The lease by our clock from now on, and its net counted from now (H4, H6).
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
local removed = redis.pcall('zrem', KEYS[2], ARGV[3])
if type(removed) == 'table' then return {1, removed.err} end
return {1, ''}
