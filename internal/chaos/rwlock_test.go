package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock"
)

// The rwlock checks on hand-made histories: the mode's read/write lock
// (CheckLinearizable knows it by its name), on the timeline of
// checker_test.go.

var rwBounds = Bounds{Recovery: 50 * time.Millisecond, Lease: 200 * time.Millisecond, RWLock: RWLockName}

// reader is acq on a reader key of its own of the mode's read/write lock.
func reader(client string, sent, granted, leaseEnd, exit int) Acquisition {
	a := acq(client, 0, sent, granted, leaseEnd, exit)
	a.Key = setnxlock.ReaderKey(RWLockName, client)
	return a
}

// writer is acq on the writer key of the mode's read/write lock.
func writer(client string, sent, granted, leaseEnd, exit int) Acquisition {
	a := acq(client, 0, sent, granted, leaseEnd, exit)
	a.Key = setnxlock.WriterKey(RWLockName)
	return a
}

func TestReadersTogetherAndWritersAloneAreNoViolation(t *testing.T) {
	r1 := reader("r1", 0, 1, 200, 100)
	r2 := reader("r2", 0, 2, 200, 150)     // beside r1
	w := writer("w", 10, 150, 350, 200)    // once both readers left
	r3 := reader("r3", 160, 200, 400, 250) // the instant w's section ended
	h := History{Mode: ModeRWLock, Acquisitions: []Acquisition{r1, r2, w, r3}, End: ms(1000)}
	r := Check(h, rwBounds)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 1, r.ReaderOverlaps, "r1 and r2 held it together")
	l := CheckLinearizable(h, time.Second)
	assert.Empty(t, l.Illegal)
	assert.Empty(t, l.Violations(r))
}

func TestAReaderBesideAWriterIsCaughtThoughNoKeyHasTwoHolders(t *testing.T) {
	w := writer("w", 0, 1, 200, 100)
	r1 := reader("r1", 5, 50, 250, 120) // entered w's section
	h := History{Mode: ModeRWLock, Acquisitions: []Acquisition{w, r1}, End: ms(1000)}
	r := Check(h, rwBounds)
	require.Equal(t, 1, r.Count(WriterOverlap), r.Violations)
	v := r.Violations[0]
	assert.Equal(t, RWLockName, v.Key)
	assert.Equal(t, w.ID(), v.First)
	assert.Equal(t, r1.ID(), v.Second)
	assert.Contains(t, v.Detail, "a reader")
	assert.Zero(t, r.Count(LeaseOverlap), "every key had one holder")

	l := CheckLinearizable(h, time.Second)
	assert.Contains(t, l.Illegal, RWLockName, "no read/write lock allows it")
	assert.NotContains(t, l.Illegal, setnxlock.WriterKey(RWLockName), "the writer key alone had one holder")
	assert.Zero(t, Report{Violations: l.Violations(r)}.Count(CheckersDisagree), "both checkers found it")
}

func TestTwoWritersAreCaughtByEveryCheck(t *testing.T) {
	w1 := writer("w1", 0, 1, 200, 100)
	w2 := writer("w2", 5, 50, 250, 120)
	h := History{Mode: ModeRWLock, Acquisitions: []Acquisition{w1, w2}, End: ms(1000)}
	r := Check(h, rwBounds)
	assert.Equal(t, 1, r.Count(WriterOverlap), r.Violations)
	assert.Equal(t, 1, r.Count(LeaseOverlap), r.Violations)
	l := CheckLinearizable(h, time.Second)
	assert.Contains(t, l.Illegal, RWLockName)
	assert.Contains(t, l.Illegal, setnxlock.WriterKey(RWLockName))
}

func TestAWriterPastItsLeaseIsCountedOnlyWhileItsLeaseIsLive(t *testing.T) {
	stalled := writer("w", 0, 1, 90, -1)
	stalled.LastLive, stalled.Overran = ms(10), true // its next check, after a stall, found the lease over (H8): live from 1 to 10
	stalled.Released = ms(150)
	r1 := reader("r1", 5, 10, 210, 120) // entered as the writer's live part ended
	h := History{Mode: ModeRWLock, Acquisitions: []Acquisition{stalled, r1}, End: ms(1000)}
	assert.Empty(t, Check(h, rwBounds).Violations)
}

func TestAReaderCountsForTheLivenessOfTheWholeLock(t *testing.T) {
	crashed := reader("r1", 0, 1, 200, -1)
	crashed.Crashed = ms(50)
	w := writer("w", 10, 400, 600, 450) // the writer waited 200ms past the crashed reader's lease
	h := History{Mode: ModeRWLock, Acquisitions: []Acquisition{crashed, w}, End: ms(2000)}
	r := Check(h, rwBounds)
	require.Equal(t, 1, r.Count(SlowRecovery), r.Violations)
	assert.Equal(t, setnxlock.WriterKey(RWLockName), r.Violations[0].Key)
	assert.Equal(t, crashed.ID(), r.Violations[0].First)

	assert.Equal(t, 1, Check(h, bounds).Count(SlowRecovery), "outside an rwlock run, the reader's key alone: never acquired again")
}

// withToken is a with the fencing token token.
func withToken(a Acquisition, token int64) Acquisition {
	a.Token = token
	return a
}

func TestTokensInReadWriteOrderAreNoViolation(t *testing.T) {
	w1 := withToken(writer("w1", 0, 1, 200, 50), 1)
	r1 := withToken(reader("r1", 60, 70, 270, 100), 3)
	r2 := withToken(reader("r2", 61, 71, 271, 100), 2) // readers beside each other: any order between them
	w2 := withToken(writer("w2", 65, 120, 320, 150), 4)
	h := History{Mode: ModeRWLock, Acquisitions: []Acquisition{w1, r1, r2, w2}, End: ms(1000)}
	assert.Empty(t, Check(h, rwBounds).Violations)
	assert.Empty(t, rwTokenOrder(RWLockName, []Acquisition{reader("r", 0, 1, 200, 50), writer("w", 60, 70, 270, 100)}), "no tokens: not fenced")
}

func TestAReaderBelowTheLastWritersTokenIsCaught(t *testing.T) {
	w := withToken(writer("w", 0, 1, 200, 50), 5)
	r := withToken(reader("r", 60, 70, 270, 100), 4)
	h := History{Mode: ModeRWLock, Acquisitions: []Acquisition{w, r}, End: ms(1000)}
	got := Check(h, rwBounds)
	require.Equal(t, 1, got.Count(TokenOrder), got.Violations)
	assert.Equal(t, w.ID(), got.Violations[0].First)
	assert.Equal(t, r.ID(), got.Violations[0].Second)
}

func TestAWriterBelowAnEarlierReadersTokenIsCaught(t *testing.T) {
	r := withToken(reader("r", 0, 1, 200, 50), 5)
	w := withToken(writer("w", 60, 70, 270, 100), 4)
	dup := withToken(reader("d", 80, 110, 300, 120), 4)
	h := History{Mode: ModeRWLock, Acquisitions: []Acquisition{r, w, dup}, End: ms(1000)}
	got := Check(h, rwBounds)
	assert.Equal(t, 3, got.Count(TokenOrder), "w below r, d not above w, and w and d both 4: %v", got.Violations)
	var drew bool
	for _, v := range got.Violations {
		drew = drew || v.Detail == "both drew token 4"
	}
	assert.True(t, drew, "a token drawn twice: %v", got.Violations)
}
