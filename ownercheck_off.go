//go:build setnxlock_no_owner_check

package setnxlock

import _ "embed" // the broken owner check

// ownerCheck is off: Release and Refresh treat any value at the key as ours
// (a deliberately broken H3, for the fault-injection harness's
// broken-assumption runs only).
const ownerCheck = false

// ownedLua calls every value ours.
//
//go:embed lua/owned_anyone.lua
var ownedLua string
