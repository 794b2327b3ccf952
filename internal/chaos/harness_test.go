package chaos

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These runs are short: the ≥10⁴-acquisition run is `make chaos`. They
// assert what the checker found, never how long anything took; recovery
// times are logged.

// shortConfig is DefaultConfig scaled down to a few seconds, with faults
// frequent enough that every kind happens.
func shortConfig(t *testing.T, clientBinary string) Config {
	cfg := DefaultConfig()
	cfg.Seed = 7
	cfg.Acquisitions = 500
	cfg.Duration = 60 * time.Second // a bound for a stuck run, not an expectation
	cfg.Goroutines, cfg.Procs, cfg.Keys = 4, 2, 3
	cfg.KillRate, cfg.PauseRate, cfg.CrashRate, cfg.StallRate = 0.03, 0.01, 0.01, 0.005
	cfg.RestartEvery = 200
	cfg.ClientBinary = clientBinary
	cfg.Log = testLog{t}
	return cfg
}

// needRedis skips without redis-server, except under CI=true.
func needRedis(t *testing.T) {
	t.Helper()
	if _, err := redisBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	t.Log("\n" + res.Details() + res.Summary())
	require.GreaterOrEqual(t, res.Report.Acquisitions, cfg.Acquisitions, "the run reached its target")
	return res
}

func TestARunUnderTheAssumptionsHasNoSafetyViolation(t *testing.T) {
	needRedis(t)
	res := run(t, shortConfig(t, buildClient(t, "")))
	assert.Zero(t, res.Report.Safety(), "safety violations under the assumptions")
	assert.Positive(t, res.Faults.Kills, "client processes killed inside critical sections")
	assert.Positive(t, res.Faults.Restarts, "server restarts")
	assert.Positive(t, res.Faults.Network.Total(), "network faults")
	assert.NotEmpty(t, res.Report.Recovered, "crashed holders whose lease was recovered")
}

func TestBrokenAssumptionsAreCaught(t *testing.T) {
	needRedis(t)
	for _, tc := range []struct {
		name, tags   string
		acquisitions int // enough for the failure to show many times over with seed 7
		caughtAs     string
	}{
		{BreakSkew, "", 200, LeaseOverlap},
		{BreakRestartNoPersistence, "", 300, TokenOrder},
		{BreakOwnerCheck, OwnerCheckOffTag, 100, LeaseOverlap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The owner-check run's clients are built with -tags
			// setnxlock_no_owner_check: the library's owner check off.
			cfg := shortConfig(t, buildClient(t, tc.tags))
			cfg.Acquisitions = tc.acquisitions
			require.NoError(t, cfg.Break(tc.name))
			require.Equal(t, tc.tags, cfg.ClientTags)
			res := run(t, cfg)
			assert.Positive(t, res.Report.Count(tc.caughtAs), "the checker must catch %s", tc.name)
		})
	}
}

func TestWorkerFlagsRoundTrip(t *testing.T) {
	cfg := WorkerConfig{
		Name: "p1.2", Redis: "127.0.0.1:1", Resource: "/tmp/r.sock", Keys: []string{"a", "b"}, Seed: 9,
		Offset: -3 * time.Millisecond, TTL: time.Second, Margin: 5 * time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 9 * time.Millisecond, ReadTimeout: 50 * time.Millisecond,
		MaxRetries: -1, LongHoldRate: 0.25, NoScripts: true,
	}
	parsed, err := ParseWorkerArgs(cfg.Args())
	require.NoError(t, err)
	assert.Equal(t, cfg, parsed)
}

func TestAnUnknownAssumptionIsRefused(t *testing.T) {
	cfg := DefaultConfig()
	assert.Error(t, cfg.Break("gravity"))
}

// testLog sends progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}
