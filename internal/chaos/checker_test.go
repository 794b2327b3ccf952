package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The checker's tests are hand-made histories, each breaking one property,
// on a timeline in milliseconds from t0.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// acq is an acquisition of key "k" sent at sent, granted at granted, with
// a lease ending at leaseEnd and a Release called at released (-1: never).
func acq(client string, token int64, sent, granted, leaseEnd, released int) Acquisition {
	a := Acquisition{Client: client, Seq: 1, Key: "k", Token: token, Sent: ms(sent), Granted: ms(granted), LeaseEnd: ms(leaseEnd)}
	if released >= 0 {
		a.Released = ms(released)
	}
	return a
}

func op(a Acquisition, at int, accepted bool) Op {
	return Op{AcqID: a.ID(), Key: a.Key, Token: a.Token, At: ms(at), Accepted: accepted}
}

var bounds = Bounds{Recovery: 50 * time.Millisecond}

func TestACleanHistoryHasNoViolations(t *testing.T) {
	a := acq("a", 1, 0, 1, 200, 10)      // released early
	b := acq("b", 2, 5, 11, 211, -1)     // took the key after a's release; its lease ran out
	c := acq("c", 3, 205, 212, 412, 220) // took b's expired lease over
	h := History{
		Acquisitions: []Acquisition{a, b, c},
		Ops:          []Op{op(a, 2, true), op(a, 3, true), op(b, 12, true), op(c, 213, true), op(b, 214, false)},
		End:          ms(1000),
	}
	r := Check(h, bounds)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 3, r.Acquisitions)
}

func TestTwoLiveLeasesAtOnceAreAnOverlap(t *testing.T) {
	a := acq("a", 1, 0, 1, 200, 150)
	b := acq("b", 2, 90, 100, 300, -1) // granted while a's lease ran and before a released
	r := Check(History{Acquisitions: []Acquisition{a, b}, End: ms(1000)}, bounds)
	require.Equal(t, 1, r.Count(LeaseOverlap), r.Violations)
	assert.Equal(t, a.ID(), r.Violations[0].First)
	assert.Equal(t, b.ID(), r.Violations[0].Second)
}

func TestALeaseEndsAtItsExpiryOrItsRelease(t *testing.T) {
	paused := acq("a", 1, 0, 1, 200, 500) // released long after its lease: only the lease counts
	next := acq("b", 2, 190, 201, 400, 250)
	released := acq("c", 3, 240, 250, 450, -1) // granted the instant b called Release
	r := Check(History{Acquisitions: []Acquisition{paused, next, released}, End: ms(1000)}, bounds)
	assert.Empty(t, r.Violations)
}

func TestOverlapsOfOtherKeysDoNotCount(t *testing.T) {
	a := acq("a", 1, 0, 1, 200, -1)
	b := acq("b", 1, 0, 1, 200, -1)
	b.Key = "other"
	r := Check(History{Acquisitions: []Acquisition{a, b}, End: ms(1000)}, bounds)
	assert.Empty(t, r.Violations)
}

func TestATokenNoLargerThanAnEarlierGrantIsOutOfOrder(t *testing.T) {
	a := acq("a", 500, 0, 1, 200, 10)
	b := acq("b", 3, 20, 21, 221, 30) // a counter reset: sent after a was granted, a smaller token
	r := Check(History{Acquisitions: []Acquisition{a, b}, End: ms(1000)}, bounds)
	require.Equal(t, 1, r.Count(TokenOrder), r.Violations)
	assert.Equal(t, a.ID(), r.Violations[0].First)
}

func TestARepeatedTokenIsOutOfOrder(t *testing.T) {
	a := acq("a", 7, 0, 1, 200, 10)
	b := acq("b", 7, 20, 21, 221, 30)
	r := Check(History{Acquisitions: []Acquisition{a, b}, End: ms(1000)}, bounds)
	assert.Positive(t, r.Count(TokenOrder), r.Violations)
}

func TestConcurrentAcquisitionsMayDrawTokensInEitherOrder(t *testing.T) {
	// b was sent before a's grant came back: the server may have ordered
	// b first (b's lease then ended before a won; a took it over).
	b := acq("b", 1, 0, 1, 2, -1)
	a := acq("a", 2, 0, 3, 203, 10)
	a.Sent = ms(0)
	r := Check(History{Acquisitions: []Acquisition{a, b}, End: ms(1000)}, bounds)
	assert.Zero(t, r.Count(TokenOrder), r.Violations)
}

func TestAStaleWriteAcceptedAfterALaterHoldersIsCaught(t *testing.T) {
	a := acq("a", 1, 0, 1, 200, -1)
	b := acq("b", 2, 200, 201, 400, 210)
	h := History{
		Acquisitions: []Acquisition{a, b},
		// A resource that forgot to check tokens: a's late write went in after b's.
		Ops: []Op{op(a, 2, true), op(b, 202, true), op(a, 203, true)},
		End: ms(1000),
	}
	r := Check(h, bounds)
	require.Equal(t, 1, r.Count(FenceInterleave), r.Violations)
	assert.Equal(t, a.ID(), r.Violations[0].Second, "the stale holder is the one let back in")
}

func TestARefusedStaleWriteIsNoViolation(t *testing.T) {
	a := acq("a", 1, 0, 1, 200, -1)
	b := acq("b", 2, 200, 201, 400, 210)
	h := History{
		Acquisitions: []Acquisition{a, b},
		Ops:          []Op{op(a, 2, true), op(b, 202, true), op(a, 203, false)},
		End:          ms(1000),
	}
	assert.Empty(t, Check(h, bounds).Violations)
}

func TestACrashedHoldersLeaseMustBeRecoveredInTime(t *testing.T) {
	crashed := acq("a", 1, 0, 1, 200, -1)
	crashed.Crashed = ms(50)
	prompt := acq("b", 2, 190, 220, 420, 230) // 20ms after the lease ended
	r := Check(History{Acquisitions: []Acquisition{crashed, prompt}, End: ms(1000)}, bounds)
	assert.Empty(t, r.Violations)
	assert.Equal(t, []time.Duration{20 * time.Millisecond}, r.Recovered)

	late := acq("b", 2, 190, 300, 500, 310) // 100ms after, bound 50ms
	r = Check(History{Acquisitions: []Acquisition{crashed, late}, End: ms(1000)}, bounds)
	assert.Equal(t, 1, r.Count(SlowRecovery), r.Violations)
	assert.Zero(t, r.Safety())
}

func TestServerDowntimeDoesNotCountAgainstRecovery(t *testing.T) {
	crashed := acq("a", 1, 0, 1, 200, -1)
	crashed.Crashed = ms(50)
	late := acq("b", 2, 190, 300, 500, 310) // 100ms after the lease, 70 of them with the server down
	h := History{Acquisitions: []Acquisition{crashed, late}, Downtime: []Interval{{ms(150), ms(270)}}, End: ms(1000)}
	assert.Empty(t, Check(h, bounds).Violations)
}

func TestACrashedLeaseNeverRecoveredIsALivenessViolation(t *testing.T) {
	crashed := acq("a", 1, 0, 1, 200, -1)
	crashed.Crashed = ms(50)
	r := Check(History{Acquisitions: []Acquisition{crashed}, End: ms(1000)}, bounds)
	assert.Equal(t, 1, r.Count(SlowRecovery), r.Violations)

	r = Check(History{Acquisitions: []Acquisition{crashed}, End: ms(220)}, bounds)
	assert.Empty(t, r.Violations, "the run ended before the bound: not a violation")
	assert.Equal(t, 1, r.Unrecovered)
}

func TestPercentileIsNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, 99*time.Millisecond, Percentile(ds, 99))
	assert.Equal(t, 50*time.Millisecond, Percentile(ds, 50))
	assert.Equal(t, 100*time.Millisecond, Percentile(ds, 100))
	assert.Equal(t, time.Duration(0), Percentile(nil, 99))
}
