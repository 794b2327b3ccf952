//go:build !setnxlock_no_owner_check

package setnxlock

import _ "embed" // the release script's owner check

// ownerCheck is on in every normal build. The build tag
// setnxlock_no_owner_check turns it off, for the fault-injection harness
// alone: a run built that way must report violations, which shows that the
// harness's checker can catch a broken H3 check. Never ship such a build.
const ownerCheck = true

// ownedLua is the release script's owner check (H3).
//
//go:embed lua/owned.lua
var ownedLua string
