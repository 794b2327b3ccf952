package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// The second checker: each key's history as operations on a lock, checked
// for linearizability by Porcupine. It shares nothing with Check but the
// recorded history, so a bug in one checker shows as a disagreement.
//
// Every counted critical section (Acquisition.Section) is two operations
// of its holder on a lock whose state is who holds it:
//
//   - acquire, invoked when Acquire returned and completed at the entry
//     check: the holder is inside the section from then on;
//   - release, invoked at the last check that found the lease live and
//     completed when the key was certainly free of the holder (freedBy
//     with no takeover allowance: its Release returned, or its lease ended
//     by its own clock).
//
// A lock allows acquire only when free and release only by the holder.
// A key's history is split where no section is open and no operation is
// in flight, since the lock is then free in every legal order: the pieces
// are checked one by one.

// lockInput is one operation on the lock: acquire or release by holder.
type lockInput struct {
	acquire bool
	holder  int // 1 + the acquisition's index in the history
}

// lockModel is a mutex: the state is the holder, 0 when free.
var lockModel = porcupine.Model{
	Init: func() any { return 0 },
	Step: func(state, input, _ any) (bool, any) {
		in := input.(lockInput)
		holder := state.(int)
		if in.acquire {
			return holder == 0, in.holder
		}
		return holder == in.holder, 0
	},
	Equal: func(a, b any) bool { return a.(int) == b.(int) },
	DescribeOperation: func(input, _ any) string {
		in := input.(lockInput)
		if in.acquire {
			return fmt.Sprintf("acquire by #%d", in.holder)
		}
		return fmt.Sprintf("release by #%d", in.holder)
	},
}

// Linearity is what the second checker found.
type Linearity struct {
	// Illegal lists the keys whose history no lock allows, with the
	// acquisitions of the first piece that failed.
	Illegal map[string][]AcqID
	// Unknown lists the keys Porcupine could not decide within its time.
	Unknown []string
	Pieces  int // independent pieces checked
}

// CheckLinearizable checks every key's acquire and release operations
// against a lock, giving Porcupine at most timeout per key; in an rwlock
// run also every section of its read/write lock against a read/write
// lock (checkRWLinearizable). A group lock's section counts on each of
// its keys (perKey).
func CheckLinearizable(h History, timeout time.Duration) Linearity {
	h = h.perKey()
	res := Linearity{Illegal: map[string][]AcqID{}}
	byKey := map[string][]porcupine.Operation{}
	for i, a := range h.Acquisitions {
		byKey[a.Key] = append(byKey[a.Key], sectionOps(a, i, func(acquire bool) any { return lockInput{acquire: acquire, holder: i + 1} })...)
	}
	for _, key := range sortedKeys(byKey) {
		res.decide(h, key, lockModel, byKey[key], timeout)
	}
	if h.Mode == ModeRWLock {
		res.checkRWLinearizable(h, RWLockName, timeout)
	}
	return res
}

// sectionOps are the two operations of the acquisition a, the i-th of
// the history, if it counts a section: acquire, invoked when Acquire
// returned and completed at the entry check, and release, invoked at the
// last check that found the lease live and completed when the key was
// certainly free of the holder. input gives each's input. Their client is
// the holder, i + 1.
func sectionOps(a Acquisition, i int, input func(acquire bool) any) []porcupine.Operation {
	s, ok := a.Section()
	if !ok {
		return nil
	}
	freed := a.freedBy(0)
	return []porcupine.Operation{
		{ClientId: i + 1, Input: input(true), Call: a.Granted.UnixNano(), Return: max(s.From.UnixNano(), a.Granted.UnixNano())},
		{ClientId: i + 1, Input: input(false), Call: s.To.UnixNano(), Return: max(freed.UnixNano(), s.To.UnixNano())},
	}
}

// decide checks ops, the operations of key (pairs from sectionOps), piece
// by piece against model within timeout, and records under key the first
// piece that is illegal, with the acquisitions whose acquire it holds, or
// that key was undecided.
func (res *Linearity) decide(h History, key string, model porcupine.Model, ops []porcupine.Operation, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, piece := range pieces(ops) {
		left := time.Until(deadline)
		if left <= 0 {
			res.Unknown = append(res.Unknown, key)
			return
		}
		res.Pieces++
		switch porcupine.CheckOperationsTimeout(model, piece, left) {
		case porcupine.Illegal:
			var ids []AcqID
			for i := 0; i < len(piece); i += 2 { // pairs: acquire, release
				ids = append(ids, h.Acquisitions[piece[i].ClientId-1].ID())
			}
			res.Illegal[key] = ids
			return
		case porcupine.Unknown:
			res.Unknown = append(res.Unknown, key)
			return
		}
	}
}

// pieces splits one key's operations into the connected stretches of
// their sections, from an acquire's call to its release's return: between
// two stretches nothing is in flight and the lock is free in every legal
// order. ops come in pairs, each acquire followed by its release.
func pieces(ops []porcupine.Operation) [][]porcupine.Operation {
	pairs := make([][2]porcupine.Operation, 0, len(ops)/2)
	for i := 0; i+1 < len(ops); i += 2 {
		pairs = append(pairs, [2]porcupine.Operation{ops[i], ops[i+1]})
	}
	slices.SortFunc(pairs, func(a, b [2]porcupine.Operation) int { return cmp.Compare(a[0].Call, b[0].Call) })
	var out [][]porcupine.Operation
	var piece []porcupine.Operation
	var end int64 // the latest return in the piece so far
	for _, p := range pairs {
		if len(piece) > 0 && p[0].Call > end {
			out = append(out, piece)
			piece = nil
		}
		piece = append(piece, p[0], p[1])
		end = max(end, p[0].Return, p[1].Return)
	}
	if len(piece) > 0 {
		out = append(out, piece)
	}
	return out
}

// Violations turns the second checker's findings into violations, and
// compares them with the first checker's, key by key: a key one checker
// finds broken and the other not is a CheckersDisagree violation.
func (l Linearity) Violations(r Report) []Violation {
	overlapping := map[string]bool{}
	for _, v := range r.Violations {
		if v.Kind == LeaseOverlap || v.Kind == WriterOverlap { // a writer's under the read/write lock's name
			overlapping[v.Key] = true
		}
	}
	unknown := map[string]bool{}
	for _, key := range l.Unknown {
		unknown[key] = true
	}
	var out []Violation
	for _, key := range sortedKeys(l.Illegal) {
		ids := l.Illegal[key]
		v := Violation{Kind: NotLinearizable, Key: key,
			Detail: fmt.Sprintf("no lock allows the %d sections of one stretch of this key", len(ids))}
		if len(ids) > 0 {
			v.First, v.Second = ids[0], ids[len(ids)-1]
		}
		out = append(out, v)
		if !overlapping[key] {
			out = append(out, Violation{Kind: CheckersDisagree, Key: key,
				Detail: "Porcupine finds no lock order, the lease checker no overlap"})
		}
	}
	for _, key := range sortedKeys(overlapping) {
		if _, illegal := l.Illegal[key]; !illegal && !unknown[key] {
			out = append(out, Violation{Kind: CheckersDisagree, Key: key,
				Detail: "the lease checker finds an overlap, Porcupine a lock order"})
		}
	}
	return out
}
