-- owned.lua: owned(value), the owner check of a release (H3), used by
-- release_alone.lua and release.lua; prefixed with value.lua.
--
-- ARGV[9]     our owner token, or '' when our values carry none
-- ARGV[12..]  without a token: the exact values that are ours
--
-- A value is ours when it carries our token (value.lua's tokenOf: exact on
-- the token, whatever identity follows it) or, without one, when it is
-- exactly a value we wrote.
local function owned(value)
  if ARGV[9] ~= '' then
    return tokenOf(value) == ARGV[9]
  end
  for i = 12, #ARGV do
    if value == ARGV[i] then return true end
  end
  return false
end
