-- release_alone.lua: release.lua's way when nobody waits, taken before
-- the queue's definitions are read (release.lua is prefixed with value.lua,
-- owned.lua, this file, protocol.lua and handon.lua; KEYS and ARGV are
-- release.lua's). An uncontended release then costs the server little
-- more than a bare compare-and-delete: the common path pays only for
-- itself.
--
-- It applies only where release.lua, run in full, would take the very
-- same steps: nothing to remember (ARGV[8] is '0': our values carry a
-- token, or the lease is over) and a queue to look at (ARGV[7] is not '')
-- whose head is nobody. handOn would then read the same empty head and
-- return, nobody is told (an empty queue means nobody listens), and the
-- key is deleted if it is ours (H3). It reads the head with ZRANGE, as
-- handOn does, so it needs no ACL rule the handoff does not. Anything
-- else, a refused ZRANGE or a queue of another type included, takes
-- release.lua's full way, which decides it.
if ARGV[8] == '0' and ARGV[7] ~= '' then
  local head = redis.pcall('zrange', KEYS[2], 0, 0)
  if type(head) == 'table' and not head.err and #head == 0 then
    local current = redis.pcall('get', KEYS[1])
    if type(current) ~= 'string' or not owned(current) then return {0, ''} end
    redis.call('del', KEYS[1])
    return {1, ''}
  end
end
