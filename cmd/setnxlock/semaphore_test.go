package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/await"
)

// holder is a shell command for run --permits: it writes the key it holds
// into started.<pid> in its working directory, then runs until the file
// go exists there, and writes ended.<pid>.
const holder = `echo "$SETNXLOCK_KEY $SETNXLOCK_SEMAPHORE" > started.$$; while [ ! -e go ]; do sleep 0.02; done; touch ended.$$`

// started lists what the holders started in dir wrote: one line each.
func started(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "started.*"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSpace(string(data)))
	}
	slices.Sort(lines)
	return lines
}

// Two runs --permits 2 run their commands at the same time, each on a
// permit of its own; a third gives up with -n and, waiting, starts its
// command only once a permit is released.
func TestRunPermitsLetsNCommandsRunAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dir := t.TempDir()
	first := s.start(t, dir, "run", "--permits", "2", "gpu", "-c", holder)
	second := s.start(t, dir, "run", "--permits", "2", "gpu", "-c", holder)
	eventually(t, 10*time.Second, func() bool { return len(started(t, dir)) == 2 }, "both runs --permits 2 starting their commands")
	want := []string{setnxlock.PermitKey("gpu", 0) + " gpu", setnxlock.PermitKey("gpu", 1) + " gpu"}
	if got := started(t, dir); !slices.Equal(got, want) {
		t.Fatalf("the two commands hold %q, want one permit each: %q", got, want)
	}

	s.run(t, "run", "-n", "--permits", "2", "gpu", "--", "touch", "ran").expect(t, exitConflict, "-n with both permits held")
	s.run(t, "run", "-w", "0.3", "-E", "9", "--permits", "2", "gpu", "--", "true").expect(t, 9, "-w 0.3 -E 9 with both permits held")

	thirdDir := t.TempDir()
	third := s.start(t, thirdDir, "run", "-w", "15", "--permits", "2", "gpu", "-c", holder)
	eventually(t, 10*time.Second, func() bool {
		return strings.Contains(s.run(t, "semaphore", "status", "--json", "gpu").stdout, `"waiters":1`)
	}, "the third run waiting for a permit")
	time.Sleep(200 * time.Millisecond) // time enough to start wrongly
	if got := started(t, thirdDir); len(got) != 0 {
		t.Fatalf("a third command started while both permits were held: %q", got)
	}

	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{first, second} {
		if code, _ := p.exit(t, 10*time.Second); code != 0 {
			t.Fatalf("a holder exited %d: %s", code, p.errors())
		}
	}
	eventually(t, 10*time.Second, func() bool { return len(started(t, thirdDir)) == 1 }, "the third run starting its command once permits were released")
	if err := os.WriteFile(filepath.Join(thirdDir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := third.exit(t, 10*time.Second); code != 0 {
		t.Fatalf("the third run exited %d: %s", code, third.errors())
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the -n run's command ran while both permits were held")
	}
	for i := range 2 {
		if v := s.value(t, setnxlock.PermitKey("gpu", i)); v != "<missing>" {
			t.Errorf("permit %d left at %q after every run ended", i, v)
		}
	}
}

// A run --permits with another count than the recorded one is refused
// with 78 before writing anything or running its command.
func TestRunPermitsRefusesAMismatchedCount(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.run(t, "run", "--permits", "2", "gpu", "--", "true").expect(t, 0, "the first run, recording 2 permits")
	dir := t.TempDir()
	r := s.runIn(t, dir, "run", "--permits", "3", "gpu", "--", "touch", "ran").expect(t, exitPermitsMismatch, "--permits 3 against 2 recorded")
	if !strings.Contains(r.stderr, "2 permits recorded") || !strings.Contains(r.stderr, "semaphore resize") {
		t.Errorf("the refusal says %q; want the recorded count and how to change it", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the command ran under a mismatched count")
	}
	if v := s.value(t, setnxlock.PermitsKey("gpu")); v != "2" {
		t.Errorf("the recorded count is %q after the refused run", v)
	}
	for i := range 3 {
		if v := s.value(t, setnxlock.PermitKey("gpu", i)); v != "<missing>" {
			t.Errorf("permit %d holds %q after the refused run", i, v)
		}
	}
}

// --permits below 1, or a name whose keys could not share a Cluster slot,
// is bad usage; as are the semaphore subcommands' wrong forms. Nothing is
// written.
func TestRunPermitsBadUsageWritesNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, args := range [][]string{
		{"run", "--permits", "0", "gpu", "--", "true"},
		{"run", "--permits", "-2", "gpu", "--", "true"},
		{"run", "--permits", "two", "gpu", "--", "true"},
		{"run", "--permits", "2", "}gpu", "--", "true"},
		{"semaphore"},
		{"semaphore", "grow", "gpu"},
		{"semaphore", "status"},
		{"semaphore", "status", "gpu", "cpu"},
		{"semaphore", "status", "}gpu"},
		{"semaphore", "resize", "gpu"},
		{"semaphore", "resize", "gpu", "0"},
		{"semaphore", "resize", "gpu", "many"},
		{"semaphore", "resize", "", "2"},
	} {
		r := s.run(t, args...).expect(t, exitUsage, strings.Join(args, " "))
		if !strings.Contains(r.stderr, "--help") || r.stdout != "" {
			t.Errorf("%q: want a message on stderr only, pointing at help; stdout %q, stderr %q", args, r.stdout, r.stderr)
		}
	}
	if keys := s.raw.Keys(context.Background(), "*").Val(); len(keys) != 0 {
		t.Fatalf("bad usage wrote to Redis: %v", keys)
	}
	for _, args := range [][]string{{"semaphore", "--help"}, {"semaphore", "status", "-h"}, {"semaphore", "resize", "--help"}} {
		if r := s.run(t, args...).expect(t, exitOK, strings.Join(args, " ")); r.stdout == "" {
			t.Errorf("%q printed nothing", args)
		}
	}
}

// semaphoreStatusOf runs semaphore status --json and decodes its object.
func (s *server) semaphoreStatusOf(t *testing.T, name string, code int) map[string]any {
	t.Helper()
	r := s.run(t, "semaphore", "status", "--json", name).expect(t, code, "semaphore status --json "+name)
	var object map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &object); err != nil {
		t.Fatalf("semaphore status --json printed %q: %v", r.stdout, err)
	}
	return object
}

// semaphore status says the recorded count, each live permit with its
// holder, foreign permit keys and the waiters, in text and JSON: 0 when a
// permit is held, 3 when none is, 4 when the count is not a number.
func TestSemaphoreStatusSaysCountHoldersAndWaiters(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := await.Context(t)

	free := s.semaphoreStatusOf(t, "gpu", exitFree)
	if free["name"] != "gpu" || free["permits"] != nil || free["held"] != 0.0 || free["waiters"] != 0.0 {
		t.Errorf("a semaphore never acquired: %v", free)
	}

	sem, err := s.locker(t, setnxlock.WithIdentity("train@gpu-1")).Semaphore("gpu", 2)
	if err != nil {
		t.Fatal(err)
	}
	permit, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := s.semaphoreStatusOf(t, "gpu", exitOK)
	holders, _ := held["holders"].([]any)
	if held["permits"] != 2.0 || held["held"] != 1.0 || len(holders) != 1 {
		t.Fatalf("one permit of 2 held: %v", held)
	}
	if h := holders[0].(map[string]any); h["key"] != permit.Key() || h["held"] != true || h["identity"] != "train@gpu-1" {
		t.Errorf("the holder: %v, want key %s held by train@gpu-1", h, permit.Key())
	}
	r := s.run(t, "semaphore", "status", "gpu").expect(t, exitOK, "semaphore status gpu")
	if !strings.HasPrefix(r.stdout, "gpu: 2 permits, 1 held, 0 waiting\n") || !strings.Contains(r.stdout, permit.Key()+": held until") ||
		!strings.Contains(r.stdout, `by "train@gpu-1"`) {
		t.Errorf("semaphore status gpu printed:\n%s", r.stdout)
	}

	other := permitKeyOtherThan(permit.Key(), "gpu", 2)
	s.raw.Set(ctx, other, "hello", 0)
	if object := s.semaphoreStatusOf(t, "gpu", exitOK); object["foreign"].([]any)[0] != other {
		t.Errorf("a foreign permit key %s: %v", other, object)
	}
	if err := permit.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s.semaphoreStatusOf(t, "gpu", exitForeign)
	s.raw.Del(ctx, other)
	s.semaphoreStatusOf(t, "gpu", exitFree)

	s.raw.Set(ctx, setnxlock.PermitsKey("junk"), "many", 0)
	s.run(t, "semaphore", "status", "junk").expect(t, exitForeign, "semaphore status of a count that is not a number")
}

// permitKeyOtherThan is the key of a permit of name (of permits) that is
// not key.
func permitKeyOtherThan(key, name string, permits int) string {
	for i := range permits {
		if k := setnxlock.PermitKey(name, i); k != key {
			return k
		}
	}
	return ""
}

// semaphore resize records the new count and prints the old and the new;
// runs with the old count are refused after it, runs with the new one
// run; a shrink leaves a live permit past the new count alone and says so.
func TestSemaphoreResizeChangesTheCountRunsAgreeOn(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := await.Context(t)
	r := s.run(t, "semaphore", "resize", "gpu", "3").expect(t, exitOK, "resize of a semaphore with no count")
	if strings.TrimSpace(r.stdout) != "gpu: permits none recorded -> 3" {
		t.Errorf("resize printed %q", r.stdout)
	}
	s.run(t, "run", "--permits", "2", "gpu", "--", "true").expect(t, exitPermitsMismatch, "--permits 2 after a resize to 3")
	s.run(t, "run", "--permits", "3", "gpu", "--", "true").expect(t, 0, "--permits 3 after a resize to 3")

	sem, err := s.locker(t).Semaphore("gpu", 3)
	if err != nil {
		t.Fatal(err)
	}
	var permits []*setnxlock.Lock
	for range 3 {
		permit, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, permit)
	}
	r = s.run(t, "semaphore", "resize", "gpu", "1").expect(t, exitOK, "a shrink to 1 under 3 live permits")
	if !strings.Contains(r.stdout, "gpu: permits 3 -> 1\n") || !strings.Contains(r.stdout, "2 live permits past the new count") {
		t.Errorf("the shrink printed %q", r.stdout)
	}
	for _, permit := range permits {
		if err := permit.Refresh(ctx, 10*time.Second); err != nil {
			t.Errorf("the shrink revoked %s: %v", permit.Key(), err)
		}
	}
	if object := s.semaphoreStatusOf(t, "gpu", exitOK); object["permits"] != 1.0 || object["held"] != 3.0 {
		t.Errorf("after the shrink: %v; want 1 permit recorded and the 3 live permits shown", object)
	}
	s.run(t, "run", "-n", "--permits", "1", "gpu", "--", "true").expect(t, exitConflict, "-n --permits 1 with permit 0 held")

	s.raw.Set(ctx, setnxlock.PermitsKey("junk"), "many", 0)
	s.run(t, "semaphore", "resize", "junk", "2").expect(t, exitForeign, "resize of a count that is not a number")
	if v := s.value(t, setnxlock.PermitsKey("junk")); v != "many" {
		t.Errorf("resize overwrote a count that is not a number with %q", v)
	}
}

// A permit lost while its command runs (force-released behind its back)
// kills the command and exits 75, as a lock's loss does (H11).
func TestRunPermitsLostPermitKillsTheCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	p := s.start(t, t.TempDir(), "run", "--permits", "1", "--ttl", "600ms", "--kill-grace", "200ms", "gpu", "-c", stubborn)
	p.waitOutput(t, "ready")
	s.run(t, "release", "--force", setnxlock.PermitKey("gpu", 0)).expect(t, exitOK, "release --force of the permit")
	if code, _ := p.exit(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitLost, p.errors())
	}
}

// A run --permits whose every permit key holds something that is not a
// lock value exits 65, leaving them alone; with only some foreign and the
// others held, -n is a conflict.
func TestRunPermitsForeignPermitKeys(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := await.Context(t)
	s.run(t, "run", "--permits", "2", "gpu", "--", "true").expect(t, 0, "the first run, recording 2 permits")
	s.raw.Set(ctx, setnxlock.PermitKey("gpu", 0), "hello", 0)
	s.raw.Set(ctx, setnxlock.PermitKey("gpu", 1), "hello", 0)
	r := s.run(t, "run", "--permits", "2", "gpu", "--", "true").expect(t, exitForeignKey, "every permit key foreign")
	if !strings.Contains(r.stderr, "not a lock value") {
		t.Errorf("the run says %q", r.stderr)
	}
	s.run(t, "run", "-n", "--permits", "2", "gpu", "--", "true").expect(t, exitForeignKey, "-n, every permit key foreign")

	s.raw.Del(ctx, setnxlock.PermitKey("gpu", 1))
	sem, err := s.locker(t).Semaphore("gpu", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	r = s.run(t, "run", "-n", "--permits", "2", "gpu", "--", "true").expect(t, exitConflict, "-n, one permit foreign and the other held")
	if !strings.Contains(r.stderr, "not a lock value") {
		t.Errorf("the run does not mention the foreign permit key: %q", r.stderr)
	}
	if v := s.value(t, setnxlock.PermitKey("gpu", 0)); v != "hello" {
		t.Errorf("the foreign permit key was changed to %q", v)
	}
}
