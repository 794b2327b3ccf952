package chaos

import (
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: a run
// must wait for every client, handler and process it started. Then it
// removes the client programs the tests built.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if builds.dir != "" {
			_ = os.RemoveAll(builds.dir)
		}
		os.Exit(code)
	}))
}

// builds holds the client programs built so far, one per set of build
// tags, so that the tests link each only once.
var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string
}

func buildClient(t *testing.T, tags string) string {
	t.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if bin, ok := builds.bins[tags]; ok {
		return bin
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "setnxlock-chaos-test-")
		require.NoError(t, err)
		builds.dir, builds.bins = dir, map[string]string{}
	}
	bin, err := BuildClient(builds.dir, tags)
	require.NoError(t, err)
	builds.bins[tags] = bin
	return bin
}
