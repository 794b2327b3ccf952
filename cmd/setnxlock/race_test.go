package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/setnxlock/setnxlock/internal/await"
)

// Two runs race for one key, round after round: their commands never
// overlap. Each command claims a marker directory (mkdir is atomic and
// fails if it exists) and exits 99 if the other holds it; the log of
// starts and ends must alternate.
func TestTwoRunsRacingForOneKeyNeverOverlap(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dir := t.TempDir()
	const rounds = 50
	script := `mkdir marker || exit 99; echo "start $RACER" >> log; sleep 0.01; echo "end $RACER" >> log; rmdir marker`
	var wg sync.WaitGroup
	failures := make(chan string, 2*rounds)
	for _, racer := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				// Not s.runIn: a goroutine other than the test's must not call t.Fatal.
				cmd := exec.Command(binary, "run", "-w", "15", "--ttl", "2s", "race", "-c", "RACER="+racer+"; "+script)
				cmd.Dir, cmd.Env = dir, append(os.Environ(), urlEnv+"="+s.url)
				if out, err := cmd.CombinedOutput(); err != nil { // bounded: -w 15 ends the wait, and the command is 10ms
					failures <- fmt.Sprintf("%s: %v: %s", racer, err, out)
				}
			}
		}()
	}
	await.Group(t, &wg, "two racers' %d rounds each", rounds)
	close(failures)
	for f := range failures {
		t.Errorf("a run failed (99: the other was inside): %s", f)
	}
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	if len(lines) != 4*rounds {
		t.Fatalf("%d log lines, want %d", len(lines), 4*rounds)
	}
	for i := 0; i < len(lines); i += 2 {
		start, end := lines[i], lines[i+1]
		if !strings.HasPrefix(start, "start ") || end != "end "+strings.TrimPrefix(start, "start ") {
			t.Fatalf("overlap at line %d: %q then %q", i+1, start, end)
		}
	}
}
