package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Holders that work until their lock tells them of a loss (UntilLost): the
// loss must be signalled by the end of the lease, by the holder's clock,
// within the slack (loss.go).

var untilLost = Bounds{Recovery: 50 * time.Millisecond, Lease: 200 * time.Millisecond, LossSlack: 80 * time.Millisecond,
	UntilLost: func(string) string { return "g" }}

// cutOff is a holder of "k" granted at 1 whose lease ends at 200 and that
// was still working then: told of the loss at told (-1: never), leaving
// its section at left.
func cutOff(client string, told, left int) Acquisition {
	a := acq(client, 1, 0, 1, 200, left)
	a.LastLive, a.Overran = ms(190), true
	if told >= 0 {
		a.Told, a.ToldEnd = ms(told), ms(200)
	}
	return a
}

func TestALossSignalledAtTheLeasesEndIsNoWorkAfterLoss(t *testing.T) {
	a := cutOff("a", 203, 204)
	r := Check(History{Acquisitions: []Acquisition{a}, End: ms(1000)}, untilLost)
	assert.Empty(t, r.Violations)
	assert.Equal(t, map[string][]time.Duration{"g": {3 * time.Millisecond}}, r.LossGaps)
}

func TestALossSignalledLongAfterTheLeasesEndIsWorkAfterLoss(t *testing.T) {
	a := cutOff("a", 450, 451) // a renewal in flight held the signal back 250ms
	r := Check(History{Acquisitions: []Acquisition{a}, End: ms(1000)}, untilLost)
	require.Equal(t, 1, r.Count(WorkAfterLoss), r.Violations)
	assert.Equal(t, a.ID(), r.Violations[0].First)
	assert.Contains(t, r.Violations[0].Detail, "250ms past its lease's end")
	assert.Equal(t, []time.Duration{250 * time.Millisecond}, r.LossGaps["g"])
	assert.Zero(t, r.Count(LeaseOverlap), "its lease checks alone find no overlap: only the signal was late")
}

func TestAHolderThatLeavesUntoldPastItsLeaseWorkedAfterItsLoss(t *testing.T) {
	a := cutOff("a", -1, 350)
	r := Check(History{Acquisitions: []Acquisition{a}, End: ms(1000)}, untilLost)
	require.Equal(t, 1, r.Count(WorkAfterLoss), r.Violations)
	assert.Contains(t, r.Violations[0].Detail, "left its section untold")

	a = cutOff("a", -1, 150) // its work was over before its lease
	assert.Empty(t, Check(History{Acquisitions: []Acquisition{a}, End: ms(1000)}, untilLost).Violations)
}

func TestAHolderStillWorkingUntoldWhenTheRunEndsWorkedAfterItsLoss(t *testing.T) {
	a := cutOff("a", -1, -1)
	a.Released = time.Time{}
	r := Check(History{Acquisitions: []Acquisition{a}, End: ms(1000)}, untilLost)
	assert.Equal(t, 1, r.Count(WorkAfterLoss), r.Violations)
}

func TestAStoppedProcessOrAStalledMachineIsNotWorkAfterLoss(t *testing.T) {
	a := cutOff("p0.0/1", 460, 461)
	h := History{Acquisitions: []Acquisition{a}, End: ms(1000),
		Faults: []FaultAt{{At: ms(150), Kind: FaultPause, Client: "p0.0/1", Until: ms(400)}}, // SIGSTOP across the lease's end
		Stalls: []Interval{{From: ms(400), To: ms(450)}}}
	r := Check(h, untilLost)
	assert.Empty(t, r.Violations)
	assert.Equal(t, []time.Duration{10 * time.Millisecond}, r.LossGaps["g"], "the gap less the stop and the stall")

	h.Faults[0].Kind = FaultPartition // cut off from Redis: the library's to signal in time
	assert.Equal(t, 1, Check(h, untilLost).Count(WorkAfterLoss))
}

func TestAHolderThatChecksItsLeaseItselfIsNotCheckedForWorkAfterLoss(t *testing.T) {
	a := cutOff("a", -1, 350)
	r := Check(History{Acquisitions: []Acquisition{a}, End: ms(1000)}, bounds)
	assert.Empty(t, r.Violations)
	assert.Empty(t, r.LossGaps)
}
