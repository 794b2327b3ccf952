package setnxlock

import "strings"

// Fencing (H8): a holder that stalls past its lease may still act on the
// protected resource after the next holder has taken over. With
// WithFencing every acquisition draws a number from a counter in Redis, in
// the same transaction that wins the lock, so tokens strictly increase from
// one holder of a key to the next, including takeovers of crashed holders.
// The resource remembers the highest token it has seen and rejects lower
// ones.

// FencingToken returns the lock's fencing token, or 0 when the Locker was
// made without WithFencing. Tokens of successive holders of a key strictly
// increase; pass the token with every write to the protected resource and
// have it reject any token lower than one it has already accepted.
func (k *Lock) FencingToken() int64 { return k.fencingToken }

// FenceKey returns the counter key that WithFencing draws tokens from for
// a lock key: the key plus ".fence", with a Redis Cluster hash tag so that
// both land in the same slot and can share a transaction. A key with its
// own hash tag keeps it ("{user42}.lock" → "{user42}.lock.fence"); any other
// key becomes the tag ("lock.report" → "{lock.report}.fence"). A key that
// contains '}' outside a hash tag cannot be wrapped that way: on Redis
// Cluster give such a key a hash tag of its own, or acquisitions fail with
// CROSSSLOT. The counter has no expiry: it must outlive every lock on the
// key, and it needs persistence to survive a restart (H9).
func FenceKey(key string) string { return sameSlotKey(key, ".fence") }

// sameSlotKey names a key of the library's own beside key, in key's
// Cluster slot: key itself as the hash tag, unless key has one already.
func sameSlotKey(key, suffix string) string {
	if hasHashTag(key) {
		return key + suffix
	}
	return "{" + key + "}" + suffix
}

// hasHashTag applies Redis Cluster's rule: a '{' followed later by a '}'
// with at least one byte between them.
func hasHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	return strings.IndexByte(key[open+1:], '}') > 0
}
