package setnxlock

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind.
// Run with candidateEnv set, the test binary is a candidate process of
// TestElectionAmongProcesses instead.
func TestMain(m *testing.M) {
	if config := os.Getenv(candidateEnv); config != "" {
		os.Exit(runCandidate(config))
	}
	goleak.VerifyTestMain(m)
}
