//go:build setnxlock_no_owner_check

package setnxlock

// ownerCheck is off: Release and Refresh treat any value at the key as ours
// (a deliberately broken H3, for the fault-injection harness's
// broken-assumption runs only).
const ownerCheck = false
