-- handon.lua: handOn, shared by release.lua and leave.lua; prefixed with
-- protocol.lua, whose encodings it writes.

-- recordedCount reads a recorded count as parseCount (semaphorecount.go)
-- does, so that both transports hand on by one rule: digits alone, of a
-- positive integer within int64 (leading zeros allowed); else nil. Past
-- int64 a Lua number is a float that still compares, so the digits are
-- judged as a string first.
local maxCount = '9223372036854775807'
local function recordedCount(recorded)
  if type(recorded) ~= 'string' or not string.match(recorded, '^%d+$') then return nil end
  local digits = string.gsub(recorded, '^0+', '')
  if #digits > #maxCount or (#digits == #maxCount and digits > maxCount) then return nil end
  local n = tonumber(digits)
  if not n or n < 1 then return nil end
  return n
end

-- handOn(key, waiters, now, barge, count, index)
--
-- key      the lock key, which the caller owns
-- waiters  its waiters: a sorted set of entries, scored by arrival, in
--          Unix µs by the waiter's clock (queued.lua)
-- now      the caller's clock in Unix µs
-- barge    the starvation threshold in µs: while the first waiter has
--          waited less, the key is not handed over; 0 always hands over,
--          whatever the clocks say of the wait
-- count    for a permit of a semaphore's one queue: the key of the
--          semaphore's recorded count; else nil
-- index    with count: the permit's index
--
-- A permit is handed on only while its index is below the recorded count
-- (protocol.go): one at or past it, after a shrink, is nobody's to have,
-- and the caller deletes it (returned as no waiter left). A count that is
-- missing limits nothing (the next acquisition records it again); one
-- that is not a count (recordedCount) hands nothing on.
--
-- Gives key to the first waiter whose Locker hears of it. For each
-- entry, first in line first, it takes the entry off the queue, writes
-- the provisional value for the entry's token into the key, expiring on
-- the server after the claim window and the releaser's grace (H6), and
-- only then announces it, with the end the value states, on the channel
-- of the entry's Locker: write, then announce (protocol.go). An
-- entry whose Locker nobody listens for is skipped.
--
-- Adaptive barging, after Go's sync.Mutex: while the first waiter in line
-- has waited less than barge, handing it the key would serialise every
-- cycle through a message for nothing, so the key is not handed over:
-- the waiter is only woken (the same message, with no value written for
-- it), it stays first in line, and the caller frees the key for whoever
-- comes first. Once the first waiter has waited longer, keys are handed
-- over in order. A waiter's wait is judged by two clients' clocks, so
-- skew moves the threshold by the skew; it decides who goes first, never
-- who holds.
--
-- A member that is not an entry is a listener (protocol.go): a wait that
-- listens on the key's wake channel. It is taken off the queue, and the
-- caller wakes the listeners: the third value returned.
--
-- Returns  2         not handed over: the first waiter heard it may race
--                    for the key, which the caller frees
--          1         handed to a waiter
--          0         no waiter left, or a permit past the count: the
--                    caller deletes the key
--         -1, error  the queue, the write or the channel failed (refused
--                    by ACL, say): the entry is back in its place, and the
--                    caller deletes the key and reports error
-- and third, whether the caller publishes on the key's wake channel: when
-- it frees the key, if the queue held anything; when it handed the key
-- over, if a listener was taken off. An empty queue means nobody listens:
-- no wake-up nobody hears.
local function handOn(key, waiters, now, barge, count, index)
  if count then
    local recorded = redis.pcall('get', count)
    if recorded ~= false then
      local n = recordedCount(recorded)
      if not n or index >= n then return 0, nil, true end -- its waiters are woken
    end
  end
  local seen, listeners = false, false
  while true do
    local head = redis.pcall('zrange', waiters, 0, 0, 'withscores')
    if type(head) ~= 'table' or head.err or #head < 2 then return 0, nil, seen end
    seen = true
    local entry, place = head[1], head[2]
    local locker, token = queue.entry(entry)
    if not locker then listeners = true end
    local channel = locker and queue.channel(locker)
    if locker and barge > 0 and now - tonumber(place) < barge then -- 0: whatever the clocks
      -- Nothing is written for the waiter, which stays first in line.
      local heard = redis.pcall('publish', channel, queue.payload(token, '', key))
      if type(heard) ~= 'number' then return -1, heard.err, true end
      if heard > 0 then return 2, nil, true end
      locker = nil -- nobody listens for it: it leaves the queue, below
    end
    -- Every entry this loop reads leaves the queue, or the loop ends: a
    -- refused ZREM would otherwise read the same head for ever, in a
    -- script that has written and cannot be killed.
    local taken = redis.pcall('zrem', waiters, entry)
    if type(taken) ~= 'number' then return -1, taken.err, true end
    if locker then
      local written = redis.pcall('set', key, queue.provisional(token), 'px', queue.net)
      local heard = 0
      if not written.err then
        heard = redis.pcall('publish', channel, queue.payload(token, queue.provisionalEnd, key)) -- write, then announce
      end
      if written.err or type(heard) ~= 'number' then
        redis.pcall('zadd', waiters, place, entry)
        return -1, written.err or heard.err, true
      end
      if heard > 0 then return 1, nil, listeners end
    end
  end
end
