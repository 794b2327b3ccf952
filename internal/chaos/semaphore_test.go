package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock"
)

// The semaphore checks on hand-made histories: a semaphore of two permits,
// on the timeline of checker_test.go.

var twoPermits = Bounds{Recovery: 50 * time.Millisecond, Lease: 200 * time.Millisecond, Semaphore: "s", Permits: 2}

// permit is acq on permit i of the semaphore "s".
func permit(client string, i int, sent, granted, leaseEnd, exit int) Acquisition {
	a := acq(client, 0, sent, granted, leaseEnd, exit)
	a.Key = setnxlock.PermitKey("s", i)
	return a
}

func TestTwoHoldersOfTwoPermitsAreNoViolation(t *testing.T) {
	a := permit("a", 0, 0, 1, 200, 100)
	b := permit("b", 1, 0, 2, 200, 150)
	c := permit("c", 0, 50, 100, 300, 180) // a's permit, once a left: b and c at once
	d := permit("d", 1, 60, 150, 350, 200) // b's, the instant b's section ended
	h := History{Acquisitions: []Acquisition{a, b, c, d}, End: ms(1000)}
	r := Check(h, twoPermits)
	assert.Empty(t, r.Violations)
	assert.Empty(t, CheckLinearizable(h, time.Second).Illegal)
}

func TestAThirdHolderOfTwoPermitsIsCaughtThoughNoPermitHasTwo(t *testing.T) {
	a := permit("a", 0, 0, 1, 200, 100)
	b := permit("b", 1, 0, 2, 200, 150)
	c := permit("c", 2, 5, 90, 290, 120) // a permit past the count, taken while both others were held
	h := History{Acquisitions: []Acquisition{a, b, c}, End: ms(1000)}
	r := Check(h, twoPermits)
	require.Equal(t, 1, r.Count(PermitsExceeded), r.Violations)
	v := r.Violations[0]
	assert.Equal(t, "s", v.Key)
	assert.Equal(t, a.ID(), v.First, "the first of the open holders")
	assert.Equal(t, c.ID(), v.Second, "the one too many")
	assert.Zero(t, r.Count(LeaseOverlap), "no permit key had two holders")
}

func TestTwoHoldersOfOnePermitAreCaughtByEveryCheck(t *testing.T) {
	a := permit("a", 0, 0, 1, 200, 100)
	b := permit("b", 1, 0, 2, 200, 150)
	c := permit("c", 0, 5, 90, 290, 120) // a's permit, while a held it
	h := History{Acquisitions: []Acquisition{a, b, c}, End: ms(1000)}
	r := Check(h, twoPermits)
	assert.Equal(t, 1, r.Count(LeaseOverlap), r.Violations)
	assert.Equal(t, 1, r.Count(PermitsExceeded), r.Violations)
	assert.Contains(t, CheckLinearizable(h, time.Second).Illegal, setnxlock.PermitKey("s", 0))
}

func TestHoldersOfAnotherKeyAreNotCountedAgainstThePermits(t *testing.T) {
	a := permit("a", 0, 0, 1, 200, 100)
	b := permit("b", 1, 0, 2, 200, 150)
	other := acq("c", 0, 5, 90, 290, 120) // key "k", no permit of "s"
	h := History{Acquisitions: []Acquisition{a, b, other}, End: ms(1000)}
	assert.Empty(t, Check(h, twoPermits).Violations)
}

func TestAHolderPastItsLeaseIsCountedOnlyWhileItsLeaseIsLive(t *testing.T) {
	a := permit("a", 0, 0, 1, 200, 100)
	stalled := permit("c", 1, 5, 6, 90, -1)
	stalled.LastLive, stalled.Overran = ms(10), true // its next check, after a stall, found the lease over (H8): live from 6 to 10
	stalled.Released = ms(150)
	next := permit("d", 1, 5, 10, 210, 120) // took the permit over as the stalled holder's live part ended
	h := History{Acquisitions: []Acquisition{a, stalled, next}, End: ms(1000)}
	assert.Empty(t, Check(h, twoPermits).Violations, "two holders at every instant")

	one := Bounds{Recovery: twoPermits.Recovery, Lease: twoPermits.Lease, Semaphore: "s", Permits: 1}
	r := Check(h, one)
	assert.Equal(t, 2, r.Count(PermitsExceeded), "with one permit, a and each of the others: %v", r.Violations)
}

func TestACallOfTheSemaphoreIsACallOfEveryPermit(t *testing.T) {
	won := permit("a", 1, 10, 40, 240, 50)
	won.InDoubt = true // a write of its call may have been to either permit
	gaveUp := Call{Client: "b", Seq: 1, Key: semaphoreCallKey("s"), Start: ms(20), End: ms(60), InDoubt: false}
	other := Call{Client: "c", Seq: 1, Key: "k", Start: ms(0), End: ms(5)}
	h := History{Acquisitions: []Acquisition{won}, Calls: []Call{gaveUp, other}, End: ms(1000)}
	calls := semaphoreCalls(h, twoPermits)

	p0, p1 := setnxlock.PermitKey("s", 0), setnxlock.PermitKey("s", 1)
	require.Len(t, calls[p0], 2, "the call that gave up and the one that won the other permit")
	assert.Equal(t, Call{Client: "b", Seq: 1, Key: p0, Start: ms(20), End: ms(60)}, calls[p0][0])
	assert.Equal(t, Call{Client: "a", Seq: 1, Key: p0, Start: ms(10), End: ms(40), InDoubt: true}, calls[p0][1],
		"waited on permit 0 until it won permit 1, in doubt as its call was")
	require.Len(t, calls[p1], 1, "the winner's own permit has its acquisition, not a call")
	assert.Equal(t, "b", calls[p1][0].Client)
	assert.Equal(t, []Call{other}, calls["k"])
	assert.Empty(t, calls[semaphoreCallKey("s")])

	assert.Len(t, semaphoreCalls(h, bounds)[semaphoreCallKey("s")], 1, "outside a semaphore run a call stays on its key")
}

func TestACallIsInDoubtOnlyOnThePermitsItsWritesInDoubtNamed(t *testing.T) {
	p0, p1, p2 := setnxlock.PermitKey("s", 0), setnxlock.PermitKey("s", 1), setnxlock.PermitKey("s", 2)
	won := permit("a", 1, 10, 40, 240, 50)
	won.DoubtOn = []string{p0} // a write to permit 0 lost its reply; it won permit 1
	gaveUp := Call{Client: "b", Seq: 1, Key: semaphoreCallKey("s"), Start: ms(20), End: ms(60), InDoubt: true, DoubtOn: []string{p2}}
	anyKey := Call{Client: "c", Seq: 1, Key: semaphoreCallKey("s"), Start: ms(20), End: ms(60), InDoubt: true, DoubtOn: []string{doubtAny}}
	clean := Call{Client: "d", Seq: 1, Key: semaphoreCallKey("s"), Start: ms(20), End: ms(60), DoubtOn: []string{}}
	h := History{Acquisitions: []Acquisition{won}, Calls: []Call{gaveUp, anyKey, clean}, End: ms(1000)}
	three := Bounds{Semaphore: "s", Permits: 3}
	inDoubt := map[string][]string{}
	for key, calls := range semaphoreCalls(h, three) {
		for _, c := range calls {
			if c.InDoubt {
				inDoubt[key] = append(inDoubt[key], c.Client)
			}
		}
	}
	assert.Equal(t, map[string][]string{p0: {"c", "a"}, p1: {"c"}, p2: {"b", "c"}}, inDoubt)
}

func TestADoubtListRoundTrips(t *testing.T) {
	var trace callTrace
	assert.Equal(t, []string{}, parseDoubtList(trace.doubtList()), "none")
	trace.doubted([]string{"b", "a"})
	trace.doubted([]string{"a"})
	assert.True(t, trace.doubt.Load())
	assert.Equal(t, []string{"a", "b"}, parseDoubtList(trace.doubtList()))
	assert.True(t, trace.doubtOn("a"))
	assert.False(t, trace.doubtOn("c"))
	trace.doubted(nil) // a write in doubt that named no lock key
	assert.Equal(t, []string{doubtAny}, parseDoubtList(trace.doubtList()))
	assert.True(t, trace.doubtOn("c"))
}
