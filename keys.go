package setnxlock

import "strings"

// wakeChannelPrefix starts every key's wake channel (WakeChannel).
const wakeChannelPrefix = "setnxlock:released:"

// The names the library gives the keys and channels of a lock key, all in
// one place; a Locker's handoff channel is the queue protocol's
// (protocol.go). The keys of its own sit in the lock key's Redis Cluster slot,
// so that one script or transaction can name them with it.

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
	var b strings.Builder
	b.Grow(len(key) + len("{}") + len(suffix))
	writeSameSlotKey(&b, key, suffix)
	return b.String()
}

// writeSameSlotKey writes sameSlotKey(key, suffix) to b.
func writeSameSlotKey(b *strings.Builder, key, suffix string) {
	if hasHashTag(key) {
		b.WriteString(key)
	} else {
		b.WriteByte('{')
		b.WriteString(key)
		b.WriteByte('}')
	}
	b.WriteString(suffix)
}

// hasHashTag applies Redis Cluster's rule: a '{' followed later by a '}'
// with at least one byte between them.
func hasHashTag(key string) bool { return len(hashTag(key)) < len(key) }

// waitersKey names the queue of waiters for key, in key's Cluster slot.
func waitersKey(key string) string { return sameSlotKey(key, waitersSuffix) }

// waitersOf names the queue of waiters for key as this Locker's waits and
// releases use it: waitersKey(key), or for a permit of a semaphore this
// Locker queues on, the semaphore's one queue (semwait.go), shared by all
// its permits, so that a release of any permit hands it to the
// semaphore's first waiter.
func (l *Locker) waitersOf(key string) string {
	if line, ok := l.permitLineOf(key); ok {
		return line.queue
	}
	return waitersKey(key)
}

// sharesQueue reports whether key is a permit whose queue is its
// semaphore's one queue (waitersOf).
func (l *Locker) sharesQueue(key string) bool {
	_, ok := l.permitQueues.Load(key)
	return ok
}

// permitLine is what a permit of a semaphore this Locker queues on names
// (Locker.permitQueues): the semaphore's one queue, and the count its
// handoff is checked against, so that a permit is handed on only while its
// index is below the recorded count (protocol.go).
type permitLine struct {
	queue string // waitersKey(PermitsKey(name))
	count string // PermitsKey(name): the recorded count
	index int    // the permit's index among the semaphore's permits
}

// permitLineOf returns key's permitLine when key is a permit of a
// semaphore this Locker queues on (sharesQueue).
func (l *Locker) permitLineOf(key string) (permitLine, bool) {
	line, ok := l.permitQueues.Load(key)
	if !ok {
		return permitLine{}, false
	}
	return line.(permitLine), true
}

// waitersSuffix ends the name of a key's queue (waitersKey).
const waitersSuffix = ".waiters"

// wakeChannelAndWaiters returns WakeChannel(key) and waitersKey(key), cut
// from one string: a release that hands over names both.
func wakeChannelAndWaiters(key string) (channel, waiters string) {
	var b strings.Builder
	b.Grow(len(wakeChannelPrefix) + 2*len(key) + len("{}") + len(waitersSuffix))
	b.WriteString(wakeChannelPrefix)
	b.WriteString(key)
	cut := b.Len()
	writeSameSlotKey(&b, key, waitersSuffix)
	both := b.String()
	return both[:cut], both[cut:]
}

// releasedKey names key's marker: a sorted set of the tokens of leases
// ForceRelease broke (forcetrace.go), and of the ids of scripted releases
// of bare values (release.lua), each kept for the rest of its lease, by
// which a release resent after a lost reply tells its own earlier run
// from an operator's (H5).
func releasedKey(key string) string { return sameSlotKey(key, ".released") }

// WakeChannel returns the pub/sub channel on which a Locker announces the
// release of key and its waiters listen. ACL users need it among their
// allowed channels (&pattern) for wake-ups; without it locks still work,
// by polling.
func WakeChannel(key string) string { return wakeChannelPrefix + key }

// ElectionKey returns the lock key candidates of the election name race
// for: "{name}.election", or name plus ".election" when name has a Redis
// Cluster hash tag of its own.
func ElectionKey(name string) string { return sameSlotKey(name, ".election") }

// LeaderKey returns the key of the election's record of who leads, in the
// same Cluster slot as ElectionKey(name). It holds
// "<term>:<owner token>:<value>", and is believed only while
// ElectionKey(name) holds a live lease with the same owner token. It has no
// expiry of its own, like the term counter: each leader overwrites it and
// Resign deletes it.
func LeaderKey(name string) string { return sameSlotKey(name, ".leader") }

// LeaderChannel returns the pub/sub channel on which a new leader of the
// election name publishes its record, and a resigning one "". Observe
// listens on it.
func LeaderChannel(name string) string { return "setnxlock:leader:" + name }

// librarySuffixes end the names of the keys the library keeps beside a
// lock key (sameSlotKey): its queue, its release marker, its fence
// counter, an election's record, a semaphore's count, a read/write lock's
// list of readers. None is a lock key.
var librarySuffixes = []string{waitersSuffix, ".released", ".fence", ".leader", ".permits", readersSuffix}

// isLibraryKey reports whether key is named as one of the library's own
// keys beside a lock key: one of librarySuffixes after a name with a
// Redis Cluster hash tag, as sameSlotKey writes them. A lock key of that
// shape ("{tenant}.fence") cannot be told from one and is taken for it.
func isLibraryKey(key string) bool {
	for _, suffix := range librarySuffixes {
		if base, ok := strings.CutSuffix(key, suffix); ok && hasHashTag(base) {
			return true
		}
	}
	return false
}
