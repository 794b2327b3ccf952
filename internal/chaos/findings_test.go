package chaos

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Stretches of real histories in which the harness found the library
// breaking its contract, cut to the key and the moments that matter
// (testdata/findings; docs/RELIABILITY.md tells each story). The checkers
// must go on finding each; whether the library still does it shows in
// make chaos, not here.
func TestTheCheckersStillFindWhatTheyFoundInTheLibrary(t *testing.T) {
	for _, tc := range []struct {
		file   string
		kind   string
		detail string // in the violation's detail, if not empty
		also   string // a second kind that must be found too
	}{
		// Two loops of one Locker granted the same value: a queued
		// attempt's reply was lost, and another attempt of the Locker
		// claimed the remembered write while the first took it as handed.
		{"default-one-owner-per-value.json", LeaseOverlap, "", NotLinearizable},
		// A release handed the key to a stale duplicate of a waiter's queue
		// entry; nobody claimed it for a whole lease.
		{"default-stale-entry-handed.json", SlowFreeWait, "handed by a release to the queue entry", ""},
		// The key held a value written for a queue entry nobody claimed.
		{"autorefresh-entry-nobody-claimed.json", SlowFreeWait, "which nobody claimed", ""},
		// A waiter's queued poll, held back past its read timeout, landed
		// after the waiter had won and renewed with the same token: the
		// key stated the poll's older end, and another client took it
		// while the holder's lease was live (issue 28's L1).
		{"partition-late-queued-poll.json", LeaseOverlap, "", NotLinearizable},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "findings", tc.file))
			require.NoError(t, err)
			var saved struct {
				Config  Config
				History History
			}
			require.NoError(t, json.Unmarshal(data, &saved))
			res := Recheck(saved.Config, saved.History)
			require.Positive(t, res.Report.Count(tc.kind), res.Report.Violations)
			if tc.also != "" {
				assert.Positive(t, res.Report.Count(tc.also), res.Report.Violations)
			}
			assert.Zero(t, res.Report.Count(CheckersDisagree))
			if tc.detail != "" {
				found := false
				for _, v := range res.Report.Violations {
					found = found || (v.Kind == tc.kind && strings.Contains(v.Detail, tc.detail))
				}
				assert.True(t, found, "no %s saying %q in %v", tc.kind, tc.detail, res.Report.Violations)
			}
		})
	}
}
