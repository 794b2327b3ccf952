-- value.lua: the stored value's encoding (value.go), shared by every
-- script that compares a value's owner token: queued.lua, claim.lua,
-- owned.lua (release.lua) and leave.lua, each prefixed with this file.
--
-- A value of ours is "<end>:<token>", or "<end>:<token>|<identity>" when
-- its writer has an identity (WithIdentity). The token is exactly the
-- bytes between the value's first ':' and the first '|' after it, or its
-- end: neither byte is in a token, and no identity holds a '|', so an
-- identity can never make a value carry another token. The end is the
-- bytes before the first ':'.

-- tokenOf returns a value's owner token and the end it states before it
-- (a string; tonumber reads it), or nil when the value has no ':'.
local function tokenOf(value)
  local at = string.find(value, ':', 1, true)
  if not at then return nil end
  local stop = string.find(value, '|', at + 1, true)
  local token
  if stop then token = string.sub(value, at + 1, stop - 1) else token = string.sub(value, at + 1) end
  return token, string.sub(value, 1, at - 1)
end
