package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/setnxlock/setnxlock"
)

// The rwlock mode: its one read/write lock, how its calls are recorded,
// its check that no writer's section overlaps any other section of the
// lock (writerOverlaps), and the lock as a whole for Porcupine.
//
// A loop of the mode takes the read/write lock RWLockName where other
// modes lock a key: mostly a read lock (RLock, TryRLock), sometimes the
// write lock (Lock, TryLock). A writer holds the lock's writer key
// (setnxlock.WriterKey), a reader a key of its own (setnxlock.ReaderKey),
// so each is a lock's history and checked as every other mode's key is
// (at most one holder per key: leaseOverlaps and Porcupine; the writer
// key is the writers' mutex). Which key a call wins is known only when
// it returns: the call is reported under the writer key (rwCallKey) and
// the acquisition under the key its Lock names. For the liveness checks
// the whole lock is one key, the writer key (Bounds.livenessKey): a
// writer waits on every reader, and a reader on the writers.

// The read/write lock of the mode.
const RWLockName = "chaos.rw"

// rwWriteRate is the share of an rwlock run's calls that take the write
// lock; rwTryRate the share of calls, of either kind, that make one
// attempt (TryRLock, TryLock) instead of waiting. One writer in ten
// among 36 loops keeps a writer waiting or holding most of the time, so
// that readers queue behind writers and writers drain readers.
const (
	rwWriteRate = 0.1
	rwTryRate   = 0.2
)

// rwLock is the name of the run's read/write lock, "" when the mode has
// none.
func (c Config) rwLock() string {
	if c.Mode == ModeRWLock {
		return RWLockName
	}
	return ""
}

// rwCallKey is the key a call of the read/write lock name is reported
// under before it knows which key it wins: its writer key.
func rwCallKey(name string) string { return setnxlock.WriterKey(name) }

// isReader reports whether key is a reader key of the read/write lock name.
func isReader(name, key string) bool { return strings.HasPrefix(key, setnxlock.ReaderKey(name, "")) }

// ofRWLock reports whether key is a key of the read/write lock name: its
// writer key or a reader's.
func ofRWLock(name, key string) bool { return key == setnxlock.WriterKey(name) || isReader(name, key) }

// livenessKey is the key whose liveness an acquisition of key counts
// for: in an rwlock run a reader's key counts as the lock's writer key,
// on which the calls are recorded; elsewhere key itself.
func (b Bounds) livenessKey(key string) string {
	if b.RWLock != "" && isReader(b.RWLock, key) {
		return rwCallKey(b.RWLock)
	}
	return key
}

// rwSection is one counted section on a key of a read/write lock.
type rwSection struct {
	Interval
	id     AcqID
	key    string
	writer bool
}

// rwSections returns the counted sections (Acquisition.Section) on the
// keys of the read/write lock name, sorted by entry.
func rwSections(name string, acqs []Acquisition) []rwSection {
	var out []rwSection
	for _, a := range acqs {
		if s, ok := a.Section(); ok && ofRWLock(name, a.Key) {
			out = append(out, rwSection{s, a.ID(), a.Key, !isReader(name, a.Key)})
		}
	}
	slices.SortFunc(out, func(a, b rwSection) int { return a.From.Compare(b.From) })
	return out
}

// writerOverlaps finds the sections of writers of the read/write lock
// name that overlap another section of it, a reader's or a writer's,
// judged as leaseOverlaps judges two sections of one key: each counted
// only while its holder's own clock said its lease was live, two
// overlapping when they share more than an endpoint. It also counts the
// pairs of readers' sections that overlap, which a read/write lock
// allows: a run that counts none never tested readers together. acqs
// are in any order.
func writerOverlaps(name string, acqs []Acquisition) (out []Violation, readerPairs int) {
	sections := rwSections(name, acqs)
	for i, a := range sections {
		for _, b := range sections[i+1:] {
			if !b.From.Before(a.To) {
				break // sorted by entry: no later one can start inside a's section
			}
			if !a.overlaps(b.Interval) {
				continue
			}
			if !a.writer && !b.writer {
				readerPairs++
				continue
			}
			out = append(out, Violation{Kind: WriterOverlap, Key: name, First: a.id, Second: b.id,
				Detail: fmt.Sprintf("%s entered %s into %s's section, which went on %s more within its lease",
					rwRole(b), b.From.Sub(a.From), rwRole(a), a.To.Sub(b.From))})
		}
	}
	return out, readerPairs
}

// rwTokenOrder checks the fencing order of the read/write lock name
// (WithFencing: one counter for readers and writers): a writer's token is
// greater than that of every acquisition of the lock granted before the
// writer's winning command was sent, and a reader's greater than that of
// every writer granted before its own was sent; no two acquisitions of
// the lock share a token. Acquisitions without a token (0) are left out.
// acqs are in any order.
func rwTokenOrder(name string, acqs []Acquisition) []Violation {
	var lock []Acquisition
	for _, a := range acqs {
		if a.Token != 0 && ofRWLock(name, a.Key) {
			lock = append(lock, a)
		}
	}
	var out []Violation
	byToken := map[int64]AcqID{}
	for _, a := range lock {
		if prev, dup := byToken[a.Token]; dup {
			out = append(out, Violation{Kind: TokenOrder, Key: name, First: prev, Second: a.ID(),
				Detail: fmt.Sprintf("both drew token %d", a.Token)})
		}
		byToken[a.Token] = a.ID()
	}
	granted := byGrant(lock)
	sent := slices.Clone(lock)
	slices.SortFunc(sent, func(a, b Acquisition) int { return a.Sent.Compare(b.Sent) })
	var (
		top, topWriter Acquisition // the largest tokens granted before the current one was sent: of anyone, of a writer
		next           int
	)
	for _, b := range sent {
		for ; next < len(granted) && granted[next].Granted.Before(b.Sent); next++ {
			g := granted[next]
			if g.Token > top.Token {
				top = g
			}
			if !isReader(name, g.Key) && g.Token > topWriter.Token {
				topWriter = g
			}
		}
		before, who := topWriter, "a writer's"
		if !isReader(name, b.Key) {
			before, who = top, "an earlier holder's"
		}
		if before.Token >= b.Token && before.ID() != b.ID() {
			out = append(out, Violation{Kind: TokenOrder, Key: name, First: before.ID(), Second: b.ID(),
				Detail: fmt.Sprintf("%s token %d drawn after %s token %d had been granted", rwRole(rwSection{key: b.Key, writer: !isReader(name, b.Key)}),
					b.Token, who, before.Token)})
		}
	}
	return out
}

// rwRole names a section's holder in a violation: "a writer", or "a
// reader" with its key.
func rwRole(s rwSection) string {
	if s.writer {
		return "a writer"
	}
	return "a reader (" + s.key + ")"
}

// rwCounts counts the acquisitions of the read/write lock name by
// readers and by writers.
func rwCounts(name string, acqs []Acquisition) (readers, writers int) {
	readers = len(rwWaits(name, acqs, false))
	return readers, len(rwWaits(name, acqs, true))
}

// rwWaits are the waits, from call to grant, of the acquisitions of the
// read/write lock name by writers, or by readers: a measure for the
// report, faults and all (a writer behind a crashed reader waits out its
// lease), not a check.
func rwWaits(name string, acqs []Acquisition, writers bool) []time.Duration {
	var out []time.Duration
	for _, a := range acqs {
		if ofRWLock(name, a.Key) && isReader(name, a.Key) != writers {
			out = append(out, a.Granted.Sub(called(a)))
		}
	}
	return out
}

// rwInput is one operation on a read/write lock by holder: take or give
// up a read or the write lock.
type rwInput struct {
	writer, acquire bool
	holder          int // 1 + the acquisition's index in the history
}

// rwState is a read/write lock: the writer holding it (0: none) and how
// many readers hold it.
type rwState struct{ writer, readers int }

// rwModel is a read/write lock: a read lock is taken only when no writer
// holds it, the write lock only when nobody does; each is given up only
// by a holder. A reader's release is allowed whenever a reader holds it:
// its own acquire, which returned before its release was invoked, comes
// first in every legal order, so the count stands for who.
var rwModel = porcupine.Model{
	Init: func() any { return rwState{} },
	Step: func(state, input, _ any) (bool, any) {
		in, s := input.(rwInput), state.(rwState)
		switch {
		case in.writer && in.acquire:
			return s.writer == 0 && s.readers == 0, rwState{writer: in.holder}
		case in.writer:
			return s.writer == in.holder, rwState{}
		case in.acquire:
			return s.writer == 0, rwState{readers: s.readers + 1}
		}
		return s.writer == 0 && s.readers > 0, rwState{readers: s.readers - 1}
	},
	Equal: func(a, b any) bool { return a.(rwState) == b.(rwState) },
	DescribeOperation: func(input, _ any) string {
		in := input.(rwInput)
		what := map[[2]bool]string{{true, true}: "lock", {true, false}: "unlock", {false, true}: "rlock", {false, false}: "runlock"}
		return fmt.Sprintf("%s by #%d", what[[2]bool{in.writer, in.acquire}], in.holder)
	},
}

// checkRWLinearizable checks the operations of every section on the keys
// of the read/write lock name against rwModel, as CheckLinearizable checks
// each key's against a mutex, and records what it found under name (the
// writer key alone is checked as a mutex under its own key).
func (res *Linearity) checkRWLinearizable(h History, name string, timeout time.Duration) {
	var ops []porcupine.Operation
	for i, a := range h.Acquisitions {
		if ofRWLock(name, a.Key) {
			writer := !isReader(name, a.Key)
			ops = append(ops, sectionOps(a, i, func(acquire bool) any { return rwInput{writer: writer, acquire: acquire, holder: i + 1} })...)
		}
	}
	res.decide(h, name, rwModel, ops, timeout)
}
