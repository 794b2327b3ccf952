-- owned_anyone.lua: a broken owner check that calls every value ours, for
-- the fault-injection harness's broken-assumption runs alone (the build tag
-- setnxlock_no_owner_check). Never ship it.
local function owned(value)
  return true
end
