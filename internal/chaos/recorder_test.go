package chaos

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A section entered just before its process was killed, whose report the
// resource read only after the harness recorded the kill, ends with the
// process: seen in a partition run, where a release-kill aimed at loop 1
// of p1.29 caught loop 2 5µs into its section, and its section stayed
// open, "worked 10.2s past its lease's end" until the run ended.
func TestASectionReportedAfterItsProcessWasKilledEndsWithIt(t *testing.T) {
	r := newRecorder(func(int) {})
	a := acq("p1.29/2", 0, 0, 1, 300, -1)
	a.Entered, a.LastLive = ms(0), ms(0)
	r.acquired(Acquisition{Client: a.Client, Seq: a.Seq, Key: a.Key, Granted: a.Granted})
	r.killed("p1.29", ms(2))
	r.checked(a.ID(), ms(1), true, ms(300)) // its entry, sent at 1, read after the kill
	h := r.history("partition", ms(1000))
	assert.Equal(t, ms(2), h.Acquisitions[0].Killed, "the section ended with its process")
	assert.Empty(t, r.inSection(ms(1000)), "no section left open")
}

// An unfenced holder's write (token 0) beside fenced ones, as in the
// rwlock mode, is accepted and leaves the fence where it was.
func TestAWriteWithoutATokenIsAcceptedAndMovesNoFence(t *testing.T) {
	r := newRecorder(func(int) {})
	for _, w := range []struct {
		token    int64
		accepted bool
	}{{5, true}, {0, true}, {3, false}, {5, true}, {0, true}, {6, true}, {5, false}} {
		accepted, ok := r.write(AcqID{Client: "c", Seq: w.token}, "k", w.token)
		assert.True(t, ok)
		assert.Equal(t, w.accepted, accepted, "token %d", w.token)
	}
	assert.Equal(t, 2, r.stale, "the refused writes alone counted stale")
}
