package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/setnxlock/setnxlock"
)

// The semaphore mode: its one semaphore, how its calls are recorded, and
// the check that no more holders than its count hold permits at once.
//
// A loop of the mode takes a permit of one semaphore (Semaphore.Acquire,
// or TryAcquire) where other modes lock a key. A permit is a lock on a
// permit key, so each permit key's history is a lock's, checked as every
// other mode's key is (at most one holder per permit: leaseOverlaps and
// Porcupine). Which permit a call wins is known only when it returns: the
// call is reported under the semaphore's count key (semaphoreCallKey) and
// the acquisition under the permit key its Lock names. A semaphore's
// Acquire waits on every permit key at once (Locker.Acquire on each), so
// for the liveness checks of one permit key it is a call of that key too
// (semaphoreCalls).

// The semaphore of the mode.
const (
	SemaphoreName    = "chaos.s"
	SemaphorePermits = 3
)

// semaphoreTryRate is the share of a semaphore run's calls that are one
// TryAcquire instead of an Acquire that waits: one that finds every
// permit held fails, and its loop tries again after a backoff step.
const semaphoreTryRate = 0.2

// semaphore is the name of the run's semaphore, "" when the mode has none.
func (c Config) semaphore() string {
	if c.Mode == ModeSemaphore {
		return SemaphoreName
	}
	return ""
}

// permits is the count of the run's semaphore (its keys, one per permit),
// 0 when the mode has none.
func (c Config) permits() int {
	if c.Mode == ModeSemaphore {
		return c.Keys
	}
	return 0
}

// semaphoreCallKey is the key a call of the semaphore name is reported
// under before it knows which permit it wins: its count's key.
func semaphoreCallKey(name string) string { return setnxlock.PermitsKey(name) }

// permitPrefix is what every permit key of the semaphore name starts with.
func permitPrefix(name string) string {
	return strings.TrimSuffix(setnxlock.PermitKey(name, 0), "0")
}

// isPermit reports whether key is a permit key of the semaphore name.
func isPermit(name, key string) bool { return strings.HasPrefix(key, permitPrefix(name)) }

// semaphoreCalls returns the calls of each key, for the liveness checks:
// h.Calls by their key, and in a semaphore run (b.Semaphore) each call of
// the semaphore that won nothing as a call of each of its permit keys,
// and each acquisition of a permit as a call, from its Acquire's call to
// its grant, of each other permit key: the call waited on them too, and
// it ended there without a lock on them. Each is in doubt on a key when a
// write of its that failed without a reply named that key (DoubtOn; when
// it does not say, whenever it was in doubt at all). The permit keys are those of the count
// (b.Permits) and any other an acquisition names.
func semaphoreCalls(h History, b Bounds) map[string][]Call {
	calls := map[string][]Call{}
	if b.Semaphore == "" {
		for _, c := range h.Calls {
			calls[c.Key] = append(calls[c.Key], c)
		}
		return calls
	}
	permits := make([]string, 0, b.Permits)
	for i := range b.Permits {
		permits = append(permits, setnxlock.PermitKey(b.Semaphore, i))
	}
	for _, a := range h.Acquisitions {
		if isPermit(b.Semaphore, a.Key) && !slices.Contains(permits, a.Key) {
			permits = append(permits, a.Key)
		}
	}
	callKey := semaphoreCallKey(b.Semaphore)
	for _, c := range h.Calls {
		if c.Key != callKey {
			calls[c.Key] = append(calls[c.Key], c)
			continue
		}
		for _, key := range permits {
			each := c
			each.Key, each.InDoubt = key, doubtsOn(c.InDoubt, c.DoubtOn, key)
			calls[key] = append(calls[key], each)
		}
	}
	for _, a := range h.Acquisitions {
		if !isPermit(b.Semaphore, a.Key) {
			continue
		}
		for _, key := range permits {
			if key != a.Key {
				calls[key] = append(calls[key], Call{Client: a.Client, Seq: a.Seq, Key: key, Start: called(a), End: a.Granted,
					InDoubt: doubtsOn(a.InDoubt, a.DoubtOn, key)})
			}
		}
	}
	return calls
}

// permitsExceeded finds the instants at which more critical sections on
// the permit keys of the semaphore name were open than it has permits,
// judged as leaseOverlaps judges two sections of a key: each counted
// only while its holder's own clock said its lease was live (Section),
// two sections overlapping when they share more than an endpoint. It
// reports each section that entered while permits others were open,
// naming the one of those that entered first; acqs are in any order.
func permitsExceeded(name string, permits int, acqs []Acquisition) []Violation {
	type section struct {
		Interval
		id  AcqID
		key string
	}
	var sections []section
	for _, a := range acqs {
		if s, ok := a.Section(); ok && isPermit(name, a.Key) {
			sections = append(sections, section{s, a.ID(), a.Key})
		}
	}
	slices.SortFunc(sections, func(a, b section) int { return a.From.Compare(b.From) })
	var (
		open []section // sections entered so far that may still be open
		out  []Violation
	)
	for _, s := range sections {
		// Entered no later than s: open at s's entry exactly when they end
		// after it, and then every one of them is open just after it
		// with s, so that a larger count than permits is an instant's.
		open = slices.DeleteFunc(open, func(o section) bool { return !o.To.After(s.From) })
		var with []section
		for _, o := range open {
			if o.overlaps(s.Interval) {
				with = append(with, o)
			}
		}
		open = append(open, s)
		if len(with) < permits {
			continue
		}
		holders := make([]string, 0, len(with)+1)
		for _, o := range append(with, s) {
			holders = append(holders, fmt.Sprintf("%s/%d on %s", o.id.Client, o.id.Seq, o.key))
		}
		out = append(out, Violation{Kind: PermitsExceeded, Key: name, First: with[0].id, Second: s.id,
			Detail: fmt.Sprintf("%d holders of %d permits at once, %s after the first entered: %s",
				len(with)+1, permits, s.From.Sub(with[0].From).Round(time.Microsecond), strings.Join(holders, ", "))})
	}
	return out
}
