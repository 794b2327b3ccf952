package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The multi checks on hand-made histories: groups of the keys "a", "b"
// and "c", on the timeline of checker_test.go.

// on is acq on key, a group's when key lists several.
func on(key, client string, sent, granted, leaseEnd, exit int) Acquisition {
	a := acq(client, 0, sent, granted, leaseEnd, exit)
	a.Key = key
	return a
}

func TestGroupsAndSingleKeysOneAtATimeAreNoViolation(t *testing.T) {
	g1 := on("a,b", "g1", 0, 1, 200, 100)
	g2 := on("b,c", "g2", 0, 100, 300, 150) // b once g1 left it
	s := on("a", "s", 50, 120, 320, 180)    // a beside g2, which does not hold it
	h := History{Acquisitions: []Acquisition{g1, g2, s}, End: ms(1000)}
	r := Check(h, bounds)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 3, r.Acquisitions, "a group is one acquisition")
	assert.Equal(t, 5, r.Sections, "and a section on each of its keys")
	assert.Empty(t, CheckLinearizable(h, time.Second).Illegal)
}

func TestASingleKeyInsideAGroupIsCaughtOnThatKey(t *testing.T) {
	g := on("a,b,c", "g", 0, 1, 200, 100)
	s := on("c", "s", 5, 50, 250, 120) // c while the group held it
	h := History{Acquisitions: []Acquisition{g, s}, End: ms(1000)}
	r := Check(h, bounds)
	require.Equal(t, 1, r.Count(LeaseOverlap), r.Violations)
	require.Equal(t, 1, r.Count(GroupPartial), r.Violations)
	for _, v := range r.Violations {
		switch v.Kind {
		case LeaseOverlap:
			assert.Equal(t, "c", v.Key)
		case GroupPartial:
			assert.Equal(t, "a,b,c", v.Key)
			assert.Equal(t, g.ID(), v.First)
			assert.Equal(t, s.ID(), v.Second)
		}
	}
	l := CheckLinearizable(h, time.Second)
	assert.Equal(t, []string{"c"}, sortedKeys(l.Illegal))
	assert.Zero(t, Report{Violations: l.Violations(r)}.Count(CheckersDisagree), "the checkers agree")
}

func TestTwoGroupsSharingAKeyAreTwoPartials(t *testing.T) {
	g1 := on("a,b", "g1", 0, 1, 200, 100)
	g2 := on("c,b", "g2", 5, 50, 250, 120) // b, in another order, while g1 held it
	h := History{Acquisitions: []Acquisition{g1, g2}, End: ms(1000)}
	r := Check(h, bounds)
	assert.Equal(t, 1, r.Count(LeaseOverlap), r.Violations)
	assert.Equal(t, 2, r.Count(GroupPartial), "each group held b beside the other: %v", r.Violations)
}

func TestAGroupCallIsACallOfEachOfItsKeys(t *testing.T) {
	won := on("a,b", "g1", 10, 40, 240, 50)
	won.InDoubt, won.DoubtOn = true, []string{"b"} // a write naming b lost its reply before it won
	gaveUp := Call{Client: "g2", Seq: 1, Key: "b,c", Start: ms(20), End: ms(60), InDoubt: true, DoubtOn: []string{doubtAny}}
	clean := Call{Client: "g3", Seq: 1, Key: "a,c", Start: ms(20), End: ms(60), DoubtOn: []string{}}
	single := Call{Client: "s", Seq: 1, Key: "a", Start: ms(0), End: ms(5), InDoubt: true}
	h := History{Acquisitions: []Acquisition{won}, Calls: []Call{gaveUp, clean, single}, End: ms(1000)}.perKey()

	inDoubt := map[string][]string{}
	for _, a := range h.Acquisitions {
		assert.Equal(t, won.ID(), a.ID(), "the copies keep the group's ID")
		if a.InDoubt {
			inDoubt[a.Key] = append(inDoubt[a.Key], a.Client)
		}
	}
	assert.Len(t, h.Acquisitions, 2)
	for _, c := range h.Calls {
		if c.InDoubt {
			inDoubt[c.Key] = append(inDoubt[c.Key], c.Client)
		}
	}
	assert.Len(t, h.Calls, 5)
	assert.Equal(t, map[string][]string{"a": {"s"}, "b": {"g1", "g2"}, "c": {"g2"}}, inDoubt)

	plain := History{Calls: []Call{single}}
	assert.Equal(t, plain, plain.perKey(), "a history without groups is left as it is")
}
