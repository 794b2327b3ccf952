package chaos

import (
	"fmt"
	"slices"
	"strings"
)

// The multi mode: groups of keys locked at once (Locker.AcquireMany,
// TryAcquireMany) beside single keys (Acquire) on the same keys, how a
// group is recorded, and its check (groupPartials).
//
// A group lock is on record as one acquisition, or one call, whose key
// lists the group's keys, comma-separated (groupKey); its writes in
// doubt name the keys they wrote (DoubtOn), as a semaphore's do. The
// checkers see it as a section on each of its keys (History.perKey), so
// that every per-key check, the overlap checker and Porcupine among
// them, applies to each key unchanged: a group held while one of its
// keys was someone else's is an overlap on that key.

// The keys of the mode, and its mix of calls.
const (
	multiKeys = 4 // chaos.k0–k3: groups of 2–3 of them overlap often, in every order
	// multiGroupRate is the share of calls that lock a group; the rest
	// Acquire one key. multiTryRate is the share of calls, of either
	// kind, that make one attempt (TryAcquireMany, TryAcquire).
	multiGroupRate = 0.5
	multiTryRate   = 0.2
)

// groupKey is the key a group's call and acquisition are on record
// under: its keys, comma-separated, in the order given.
func groupKey(keys []string) string { return strings.Join(keys, ",") }

// groupKeys is groupKey's other side: the keys of a key on record, one
// for a single key.
func groupKeys(key string) []string { return strings.Split(key, ",") }

// isGroup reports whether a key on record is a group's.
func isGroup(key string) bool { return strings.Contains(key, ",") }

// groupCount counts the acquisitions of groups.
func groupCount(acqs []Acquisition) int {
	n := 0
	for _, a := range acqs {
		if isGroup(a.Key) {
			n++
		}
	}
	return n
}

// perKey returns the history with each group's acquisition as an
// acquisition of each of its keys, and each group's call that won nothing
// as a call of each of its keys, each in doubt on a key when a write of
// its that failed without a reply named that key (DoubtOn; when it does
// not say, whenever it was in doubt at all). The copies of one group keep
// its ID. A history without groups is returned as it is.
func (h History) perKey() History {
	if !slices.ContainsFunc(h.Acquisitions, func(a Acquisition) bool { return isGroup(a.Key) }) &&
		!slices.ContainsFunc(h.Calls, func(c Call) bool { return isGroup(c.Key) }) {
		return h
	}
	out := h
	out.Acquisitions = eachKey(h.Acquisitions, func(a Acquisition) string { return a.Key }, func(a Acquisition, key string) Acquisition {
		a.Key, a.InDoubt = key, doubtsOn(a.InDoubt, a.DoubtOn, key)
		return a
	})
	out.Calls = eachKey(h.Calls, func(c Call) string { return c.Key }, func(c Call, key string) Call {
		c.Key, c.InDoubt = key, doubtsOn(c.InDoubt, c.DoubtOn, key)
		return c
	})
	return out
}

// eachKey returns a copy of each item for each key its key on record
// (keyOf) lists, made by one.
func eachKey[T any](items []T, keyOf func(T) string, one func(T, string) T) []T {
	out := make([]T, 0, len(items))
	for _, it := range items {
		for _, key := range groupKeys(keyOf(it)) {
			out = append(out, one(it, key))
		}
	}
	return out
}

// groupPartials restates the overlaps (LeaseOverlap violations) that
// involve a group's section, in which the group held one of its keys
// while another holder had it: a group lock that was not all of its keys.
// groups are the keys of each group's acquisition, by its ID.
func groupPartials(overlaps []Violation, groups map[AcqID]string) []Violation {
	var out []Violation
	for _, v := range overlaps {
		for _, id := range []AcqID{v.First, v.Second} {
			keys, ok := groups[id]
			if v.Kind != LeaseOverlap || !ok {
				continue
			}
			other := v.Second
			if id == v.Second {
				other = v.First
			}
			out = append(out, Violation{Kind: GroupPartial, Key: keys, First: id, Second: other,
				Detail: fmt.Sprintf("the group held %s while %s/%d held %s too", keys, other.Client, other.Seq, v.Key)})
		}
	}
	return out
}
