-- protocol.lua: the queue's encodings (protocol.go), which the caller
-- passes as the first arguments of every script prefixed with this file
-- (appendProtocolArgs):
--
-- ARGV[1]  the separator of an entry, "<Locker id><sep><token>", and of a
--          handoff's message, "<token><sep><key>"
-- ARGV[2]  the prefix of a Locker's handoff channel, before its id
-- ARGV[3]  a provisional value before the waiter's token: the end it
--          states (the releaser's clock plus the claim window, in Unix
--          ms, with the provisional mark ".0" no lease carries) and the
--          value's separator
-- ARGV[4]  a provisional value's server expiry in ms: the claim window
--          and the releaser's grace (provisionalNet), so that the server
--          never ends it before the end it states, until which its waiter
--          may hold on it (H6)
local queue = {separator = ARGV[1], channelPrefix = ARGV[2], provisionalPrefix = ARGV[3], net = ARGV[4]}
-- the end a provisional value states, as written: its prefix without the
-- value's one-byte separator
queue.provisionalEnd = string.sub(queue.provisionalPrefix, 1, -2)

-- entry splits an entry into its Locker id and token; nil for a member
-- that is not an entry (either part empty, or the token holding the
-- separator): nobody to hand to. A listener, "<token><sep>", is such a
-- member (formatListener, protocol.go): a wait on the key's wake channel,
-- which a release takes off the queue and wakes (handon.lua).
function queue.entry(member)
  local at = string.find(member, queue.separator, 1, true)
  if not at then return nil end
  local locker, token = string.sub(member, 1, at - 1), string.sub(member, at + #queue.separator)
  if locker == '' or token == '' or string.find(token, queue.separator, 1, true) then return nil end
  return locker, token
end

-- channel names the handoff channel of a Locker.
function queue.channel(locker) return queue.channelPrefix .. locker end

-- payload is the message announcing key to the wait of token,
-- "<token><sep><end><sep><key>": end is the provisional value's end for a
-- handoff, '' for a wake-up to race for a key left free (formatPayload).
-- The key goes last: keys may hold the separator.
function queue.payload(token, ends, key) return token .. queue.separator .. ends .. queue.separator .. key end

-- provisional is the value a release writes for the wait of token.
function queue.provisional(token) return queue.provisionalPrefix .. token end
