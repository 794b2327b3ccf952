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

// A short run's target, and the real time it may take: a bound for a
// stuck run, not an expectation.
const (
	shortAcquisitions = 400
	shortBound        = 60 * time.Second
)

// withTarget sets a run's target to n acquisitions and gives it as much
// real time per acquisition as shortConfig's run: a bound of shortBound for
// n acquisitions would be an expectation of speed, which a loaded machine
// misses (the rwlock run's 800 reached 776 and 786 in 60s beside two and
// four busy loops, its checkers having caught the broken owner check).
func withTarget(cfg *Config, n int) {
	cfg.Acquisitions = n
	cfg.Duration = max(shortBound, shortBound*time.Duration(n)/shortAcquisitions)
}

// shortConfig is DefaultConfig of a mode scaled down to a few seconds,
// with faults frequent enough that every kind happens.
func shortConfig(t *testing.T, mode, clientBinary string) Config {
	cfg := DefaultConfig(mode)
	cfg.Seed = 7
	cfg.Acquisitions = shortAcquisitions
	cfg.Duration = shortBound
	cfg.Goroutines, cfg.Procs, cfg.Loops, cfg.Keys = 3, 2, 2, 3
	cfg.KillRate, cfg.PauseRate, cfg.CrashRate, cfg.StallRate = 0.03, 0.01, 0.01, 0.005
	cfg.GrantPauseRate, cfg.ReleaseKillRate = 0.01, 0.01
	cfg.WaiterKillEvery, cfg.PubSubKillEvery, cfg.ScriptFlushEvery, cfg.OOMEvery = time.Second, 300*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	cfg.RestartEvery = 150
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

func TestEveryModeRunsWithoutASafetyViolation(t *testing.T) {
	needRedis(t)
	bin := buildClient(t, "")
	for _, mode := range Modes {
		t.Run(mode, func(t *testing.T) {
			cfg := shortConfig(t, mode, bin)
			if mode == ModeSemaphore {
				cfg.LongHoldRate = 0.1 // sections last a lease often enough that every permit is held at once
			}
			res := run(t, cfg)
			assert.Zero(t, res.Report.Safety(), "safety violations under the assumptions")
			assert.Zero(t, res.Report.Count(CheckersDisagree), "the two checkers disagree")
			assert.Positive(t, res.Faults.Kinds[FaultRestart], "server restarts")
			assert.Positive(t, res.Faults.Network.Total(), "network faults")
			assert.Positive(t, res.Report.Sections, "critical sections counted")
			if mode == ModeDefault {
				assert.Positive(t, res.Faults.Kinds[FaultQueuedLost], "queued attempts' replies lost")
				assert.Positive(t, res.Faults.Kinds[FaultQueuedHeld], "queued attempts held back")
			}
			if mode == ModeHeard {
				for _, kind := range []string{FaultClaimDelayed, FaultClaimDropped, FaultClaimLost, FaultHandoffHeld} {
					assert.Positive(t, res.Faults.Kinds[kind], kind)
				}
			}
			if mode == ModeSemaphore {
				keys := map[string]bool{}
				for _, a := range res.History.Acquisitions {
					keys[a.Key] = true
				}
				assert.Len(t, keys, SemaphorePermits, "acquisitions of every permit and of nothing else: %v", keys)
				assert.NotEmpty(t, permitsExceeded(SemaphoreName, SemaphorePermits-1, res.History.Acquisitions),
					"every permit held at once: the count check judged a full semaphore")
			}
			if mode == ModeRWLock {
				readers, writers := rwCounts(RWLockName, res.History.Acquisitions)
				assert.Equal(t, len(res.History.Acquisitions), readers+writers, "acquisitions of the read/write lock alone")
				assert.Positive(t, writers, "writers")
				assert.Positive(t, res.Report.ReaderOverlaps, "readers held it together: the mode is not secretly serial")
				assert.NotContains(t, res.Linearity.Unknown, RWLockName, "Porcupine decided the read/write lock")
			}
			if mode == ModeMulti {
				assert.Positive(t, groupCount(res.History.Acquisitions), "groups won")
				assert.Less(t, groupCount(res.History.Acquisitions), len(res.History.Acquisitions), "single keys won")
			}
			if mode == ModePartition {
				assert.Positive(t, res.Faults.Kinds[FaultPartition], "holders cut off")
				assert.NotEmpty(t, res.Report.LossGaps, "losses signalled to holders at work")
			}
		})
	}
}

func TestBrokenAssumptionsAreCaughtByEveryChecker(t *testing.T) {
	needRedis(t)
	both := []string{"lease", "porcupine"}
	for _, tc := range []struct {
		mode, assumption, tags string
		acquisitions           int      // enough for the failure to show many times over with seed 7
		by                     []string // the checkers that must catch it
	}{
		{ModeDefault, BreakSkew, "", 300, both},
		{ModeDefault, BreakRestartNoPersistence, "", 400, both},
		{ModeDefault, BreakOwnerCheck, OwnerCheckOffTag, 200, both}, // the release script hands over any key: the handoff's owner check off
		{ModeNoScripts, BreakOwnerCheck, OwnerCheckOffTag, 200, both},
		{ModeFencing, BreakRestartNoPersistence, "", 400, []string{"fence"}},                               // tokens start over
		{ModeHeard, BreakOwnerCheck, OwnerCheckOffTag, 200, both},                                          // under the heard mode's faults
		{ModeSemaphore, BreakOwnerCheck, OwnerCheckOffTag, 200, []string{"lease", "porcupine", "permits"}}, // a fourth holder of three permits
		{ModeRWLock, BreakOwnerCheck, OwnerCheckOffTag, 1600, []string{"writer", "porcupine-rw"}},          // readers, or a writer, beside a writer; one call in ten a writer's: at 300, 3 runs in 8 caught nothing; at 800, 1 quiet run in 5 (2026-11-27)
		{ModeMulti, BreakOwnerCheck, OwnerCheckOffTag, 200, []string{"lease", "porcupine", "group"}},       // a group beside a holder of one of its keys
	} {
		t.Run(tc.mode+"/"+tc.assumption, func(t *testing.T) {
			// The owner-check runs' clients are built with -tags
			// setnxlock_no_owner_check: the library's owner check off.
			cfg := shortConfig(t, tc.mode, buildClient(t, tc.tags))
			withTarget(&cfg, tc.acquisitions)
			require.NoError(t, cfg.Break(tc.assumption))
			require.Equal(t, tc.tags, cfg.ClientTags)
			res := run(t, cfg)
			caught, _ := Caught(res)
			assert.Subset(t, caught, tc.by, "caught by %v", caught)
			assert.Zero(t, res.Report.Count(CheckersDisagree), "the two checkers disagree")
		})
	}
}

func TestWorkerConfigRoundTrips(t *testing.T) {
	cfg := WorkerConfig{
		Name: "p1.2", Redis: []string{"127.0.0.1:1"}, Resource: "/tmp/r.sock", Keys: []string{"a", "b"}, Seed: 9,
		Offset: -3 * time.Millisecond, TTL: time.Second, Margin: 5 * time.Millisecond, Loops: 2,
		MinBackoff: time.Millisecond, MaxBackoff: 9 * time.Millisecond, ReadTimeout: 50 * time.Millisecond,
		MaxRetries: -1, LongHoldRate: 0.25, Locker: LockerConfig{Format: 2, NoScripts: true, User: UserPoller, UntilLost: true, ContextTimeout: true, Semaphore: "s", RWLock: "rw", Multi: true},
		CancelRate: 0.1, HandoffCancelRate: 0.2, CloseEvery: time.Second,
		Claims: ClaimFaults{DelayRate: 0.1, DropRate: 0.05, LoseRate: 0.05, MaxDelay: time.Second, HoldRate: 0.1, MaxHold: time.Second},
	}
	parsed, err := ParseWorkerArgs(cfg.Args())
	require.NoError(t, err)
	assert.Equal(t, cfg, parsed)
}

func TestAnUnknownAssumptionOrModeIsRefused(t *testing.T) {
	cfg := DefaultConfig(ModeDefault)
	assert.Error(t, cfg.Break("gravity"))
	cfg.Mode = "telepathy"
	_, err := Run(context.Background(), cfg)
	assert.Error(t, err)
}

func TestQueuedAttemptsAreRecognisedOnTheWire(t *testing.T) {
	queued := []string{"evalsha", "abc", "2", "chaos.k1", "{chaos.k1}.waiters", "123:TOKEN|web-1:42", "600", "ID:TOKEN", "TOKEN", "1700000000000000", "123"}
	release := []string{"evalsha", "abc", "2", "chaos.k1", "{chaos.k1}.waiters", "setnxlock:released:chaos.k1", "123", "1", "250", "0", "TOKEN"}
	leave := []string{"evalsha", "abc", "2", "chaos.k1", "{chaos.k1}.waiters", "ID:TOKEN", "TOKEN", "setnxlock:released:chaos.k1", "123", "250"}
	unqueued := []string{"evalsha", "abc", "1", "chaos.k1", "123:TOKEN", "600"}
	assert.True(t, queuedAttempt(queued))
	assert.False(t, queuedAttempt(release))
	assert.False(t, queuedAttempt(leave))
	assert.False(t, queuedAttempt(unqueued))
}

// testLog sends progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}
