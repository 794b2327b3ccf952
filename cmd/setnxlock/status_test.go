package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/await"
)

// statusOf runs status --json and decodes its object.
func (s *server) statusOf(t *testing.T, key string, code int) map[string]any {
	t.Helper()
	r := s.run(t, "status", "--json", key).expect(t, code, "status --json "+key)
	var object map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &object); err != nil {
		t.Fatalf("status --json printed %q: %v", r.stdout, err)
	}
	for _, field := range []string{"key", "held", "expires_at", "format", "waiters"} {
		if _, ok := object[field]; !ok {
			t.Errorf("status --json has no %q: %s", field, r.stdout)
		}
	}
	return object
}

// status --json for free, held, ended, classic and foreign keys, with the
// exit statuses 0 held, 3 free, 4 foreign.
func TestStatusJSONTellsHeldFreeAndForeignKeys(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := context.Background()

	free := s.statusOf(t, "k", exitFree)
	if free["key"] != "k" || free["held"] != false || free["expires_at"] != nil || free["format"] != nil || free["waiters"] != 0.0 {
		t.Errorf("a free key: %v", free)
	}

	lock := s.hold(t, "k", 30*time.Second)
	held := s.statusOf(t, "k", exitOK)
	if held["held"] != true || held["format"] != "token" {
		t.Errorf("a held key: %v", held)
	}
	if at, _ := time.Parse(time.RFC3339, held["expires_at"].(string)); !at.Equal(lock.ExpiresAt()) {
		t.Errorf("expires_at %v, want %v", held["expires_at"], lock.ExpiresAt())
	}

	ended := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
	s.raw.Set(ctx, "k", ended, 0)
	if object := s.statusOf(t, "k", exitFree); object["held"] != false || object["format"] != "seconds" || object["expires_at"] == nil {
		t.Errorf("a lease that ended: %v", object)
	}
	for value, format := range map[string]string{
		strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10):   "millis",
		strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10) + ".5": "float",
	} {
		s.raw.Set(ctx, "k", value, 0)
		if object := s.statusOf(t, "k", exitOK); object["format"] != format {
			t.Errorf("%q: %v, want format %s", value, object, format)
		}
	}

	s.raw.Set(ctx, "k", "hello", 0)
	if object := s.statusOf(t, "k", exitForeign); object["format"] != "foreign" || object["held"] != false || object["expires_at"] != nil {
		t.Errorf("garbage: %v", object)
	}
	s.raw.Del(ctx, "k")
	s.raw.RPush(ctx, "k", "a", "b")
	if object := s.statusOf(t, "k", exitForeign); object["format"] != "foreign" {
		t.Errorf("a list: %v", object)
	}
	if r := s.run(t, "status", "k").expect(t, exitForeign, "status of a list"); !strings.Contains(r.stdout, "not a lock") {
		t.Errorf("status of a list says %q", r.stdout)
	}
	if n := s.raw.LLen(ctx, "k").Val(); n != 2 {
		t.Errorf("status changed the list: %d elements", n)
	}
}

// status counts the runs waiting in the key's queue.
func TestStatusCountsWaitingRuns(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.hold(t, "k", 30*time.Second)
	s.start(t, t.TempDir(), "run", "k", "--", "true")
	s.start(t, t.TempDir(), "run", "k", "--", "true")
	eventually(t, 10*time.Second, func() bool {
		return strings.Contains(s.run(t, "status", "--json", "k").stdout, `"waiters":2`)
	}, "status counting two waiting runs")
}

// release --force deletes whoever's lease, says what it deleted, exits 3
// when there is nothing, and 4, leaving it alone, for a foreign value.
func TestReleaseForceDeletesWhoeverHoldsTheLock(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := context.Background()
	lock := s.hold(t, "k", 30*time.Second)
	value := s.value(t, "k")
	r := s.run(t, "release", "--force", "k").expect(t, exitOK, "release --force of a held key")
	if !strings.Contains(r.stdout, value) {
		t.Errorf("release --force printed %q, not the value it deleted (%q)", r.stdout, value)
	}
	if v := s.value(t, "k"); v != "<missing>" {
		t.Fatalf("the key is still %q", v)
	}
	if err := lock.Release(ctx); err == nil {
		t.Error("the holder's release succeeded after a forced release")
	}
	s.run(t, "release", "--force", "k").expect(t, exitFree, "release --force of a free key")

	s.raw.Set(ctx, "k", "hello", 0)
	s.run(t, "release", "--force", "k").expect(t, exitForeign, "release --force of garbage")
	if v := s.value(t, "k"); v != "hello" {
		t.Errorf("release --force changed a foreign value to %q", v)
	}
}

// A run holding a key that is force-released loses its lease: its command
// is killed and it exits 75.
func TestAForcedReleaseEndsTheHoldersRun(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	p := s.start(t, t.TempDir(), "run", "--ttl", "600ms", "--kill-grace", "200ms", "k", "-c", stubborn)
	p.waitOutput(t, "ready")
	s.run(t, "release", "--force", "k").expect(t, exitOK, "release --force")
	if code, _ := p.exit(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitLost, p.errors())
	}
}

// run shares keys with classic clients: --format seconds writes what
// kvz/cronlock and the SETNX page write, and so on; the command sees it
// with status.
func TestRunWritesTheChosenFormat(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, format := range []string{"token", "millis", "seconds", "float"} {
		r := s.run(t, "run", "--format", format, "k", "--", binary, "status", "--json", "k").expect(t, 0, "--format "+format)
		if !strings.Contains(r.stdout, `"format":"`+format+`"`) || !strings.Contains(r.stdout, `"held":true`) {
			t.Errorf("--format %s: status under the lock says %s", format, r.stdout)
		}
	}
}

// status says who holds a key: the identity after the owner token, in
// text and JSON; a key whose value states none has a null identity.
func TestStatusSaysWhoHoldsTheKey(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := await.Context(t)
	if _, err := s.locker(t, setnxlock.WithIdentity("report@web-1")).TryAcquire(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if object := s.statusOf(t, "k", exitOK); object["identity"] != "report@web-1" {
		t.Errorf("a key held by report@web-1: %v", object)
	}
	if r := s.run(t, "status", "k").expect(t, exitOK, "status k"); !strings.Contains(r.stdout, `by "report@web-1"`) {
		t.Errorf("status k says %q", r.stdout)
	}
	if _, err := s.locker(t, setnxlock.WithFormat(setnxlock.UnixSeconds)).TryAcquire(ctx, "bare"); err != nil {
		t.Fatal(err)
	}
	if object := s.statusOf(t, "bare", exitOK); object["identity"] != nil {
		t.Errorf("a bare timestamp states no identity: %v", object)
	}
	if _, err := s.locker(t).TryAcquire(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	if object := s.statusOf(t, "default", exitOK); object["identity"] != setnxlock.DefaultIdentity() {
		t.Errorf("the default identity is the host and process: %v, want %q", object, setnxlock.DefaultIdentity())
	}
}

// status --match lists the lock keys that match, with holder, end and
// waiters, leaving out the library's own keys; 0 when one is held, 3 when
// none is.
func TestStatusMatchListsTheLockKeys(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := await.Context(t)
	if _, err := s.locker(t, setnxlock.WithIdentity("report@web-1"), setnxlock.WithFencing()).TryAcquire(ctx, "lock.report"); err != nil {
		t.Fatal(err)
	}
	ended := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
	s.raw.Set(ctx, "lock.cron", ended, 0)
	s.raw.Set(ctx, "lock.junk", "hello", 0)
	s.raw.Set(ctx, "session.1", "not matched", 0)

	r := s.run(t, "status", "--match", "lock.*").expect(t, exitOK, "status --match with a held key")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "lock.cron: free") || !strings.HasPrefix(lines[1], "lock.junk: holds") ||
		!strings.HasPrefix(lines[2], "lock.report: held until") || !strings.Contains(lines[2], `by "report@web-1"`) {
		t.Errorf("status --match printed:\n%s", r.stdout)
	}

	r = s.run(t, "status", "--json", "--match", "lock.*").expect(t, exitOK, "status --json --match")
	var objects []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &objects); err != nil {
		t.Fatalf("status --json --match printed %q: %v", r.stdout, err)
	}
	var keys []string
	for _, o := range objects {
		keys = append(keys, o["key"].(string))
	}
	if strings.Join(keys, " ") != "lock.cron lock.junk lock.report" {
		t.Errorf("listed %v, want the three lock keys and not the fence counter %s", keys, setnxlock.FenceKey("lock.report"))
	}
	if report := objects[2]; report["held"] != true || report["identity"] != "report@web-1" || report["format"] != "token" || report["waiters"] != 0.0 {
		t.Errorf("lock.report: %v", report)
	}

	s.run(t, "status", "--match", "lock.c*").expect(t, exitFree, "status --match with no key held")
	if r := s.run(t, "status", "--match", "nothing.*").expect(t, exitFree, "status --match matching nothing"); !strings.Contains(r.stdout, "no key matches") {
		t.Errorf("status --match matching nothing says %q", r.stdout)
	}
	if r := s.run(t, "status", "--json", "--match", "nothing.*").expect(t, exitFree, "status --json --match matching nothing"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("status --json --match matching nothing printed %q", r.stdout)
	}
	s.run(t, "status", "--match", "lock.*", "lock.report").expect(t, exitUsage, "status --match with a KEY")
	s.run(t, "status", "--match", "").expect(t, exitUsage, "status --match ''")
}
