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

// A goroutine client's stall is the harness holding its loop's write to
// the resource for a lease or two (clients.go): its Lock and its loss
// watch run on. The seed-17 flake of the heard mode: a holder stalled
// right after its grant, its lease ending within the stall, and the run
// stopping 122ms past that end while the stall still held the loop. It
// could not report whether it had been told; it was last seen at the
// stall's start, well within its lease.

func TestAHolderStoppedByTheRunWhileItsLoopWasStalledIsChargedUntilTheStall(t *testing.T) {
	a := cutOff("g2.3/1", -1, -1)
	a.Released = time.Time{}
	stall := FaultAt{At: ms(150), Kind: FaultStall, Client: "g2.3/1", Until: ms(600)}
	h := History{Acquisitions: []Acquisition{a}, End: ms(320), Faults: []FaultAt{stall}}
	r := Check(h, untilLost)
	assert.Empty(t, r.Violations, "held by the harness from 150 to the run's end at 320: seen untold last at 150, within its lease")

	other := stall
	other.Client = "g2.3/0" // a sibling loop's stall held this loop nothing
	h.Faults = []FaultAt{other}
	assert.Equal(t, 1, Check(h, untilLost).Count(WorkAfterLoss), "the run stopped it 120ms past its lease, working")
}

func TestAHolderStalledPastItsLeasesEndIsChargedFromThereToTheStall(t *testing.T) {
	a := cutOff("g0.0/0", -1, -1)
	a.Released = time.Time{}
	h := History{Acquisitions: []Acquisition{a}, End: ms(500),
		Faults: []FaultAt{{At: ms(300), Kind: FaultStall, Client: "g0.0/0", Until: ms(700)}}}
	r := Check(h, untilLost)
	require.Equal(t, 1, r.Count(WorkAfterLoss), r.Violations)
	assert.Contains(t, r.Violations[0].Detail, "worked 100ms past its lease's end", "untold from 200 to its stall at 300")
}

func TestAStallThatEndedIsNoExcuseForAHolderThatLeftUntold(t *testing.T) {
	// Its stall held its loop across the lease's end; once the stall was
	// over it found itself untold and left: its Lock never said.
	a := cutOff("g0.0/0", -1, 410)
	h := History{Acquisitions: []Acquisition{a}, End: ms(1000),
		Faults: []FaultAt{{At: ms(150), Kind: FaultStall, Client: "g0.0/0", Until: ms(400)}}}
	r := Check(h, untilLost)
	require.Equal(t, 1, r.Count(WorkAfterLoss), r.Violations)
	assert.Contains(t, r.Violations[0].Detail, "worked 210ms past its lease's end", "the stall is not subtracted")
}

func TestAStallIsNoExcuseForASignalThatCameLate(t *testing.T) {
	// Its loss watch ran through the stall and saw the signal at 450,
	// 250ms late: the library's delay, not the stall's.
	a := cutOff("g0.0/0", 450, 600)
	h := History{Acquisitions: []Acquisition{a}, End: ms(1000),
		Faults: []FaultAt{{At: ms(150), Kind: FaultStall, Client: "g0.0/0", Until: ms(590)}}}
	r := Check(h, untilLost)
	require.Equal(t, 1, r.Count(WorkAfterLoss), r.Violations)
	assert.Equal(t, []time.Duration{250 * time.Millisecond}, r.LossGaps["g"])
}
