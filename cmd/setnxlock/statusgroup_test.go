package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/await"
)

// jsonOf decodes status --json's one object.
func jsonOf(t *testing.T, r result) map[string]any {
	t.Helper()
	var object map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &object); err != nil {
		t.Fatalf("status --json printed %q: %v", r.stdout, err)
	}
	return object
}

// status KEY KEY... reads a group lock's keys: each as a lock, and
// whether one lease holds them all; exit 0 only while every key is held.
func TestStatusOfSeveralKeysTellsAGroupLock(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	keys := []string{"{order7}.stock", "{order7}.payment"}

	s.run(t, append([]string{"status"}, keys...)...).expect(t, exitFree, "status of two free keys")

	group, err := s.locker(t, setnxlock.WithTTL(30*time.Second)).TryAcquireMany(await.Context(t), keys...)
	if err != nil {
		t.Fatal(err)
	}
	text := s.run(t, append([]string{"status"}, keys...)...).expect(t, exitOK, "status of a group's keys")
	if !strings.Contains(text.stdout, "all 2 keys hold one lease") {
		t.Errorf("status of a group's keys does not say one lease holds them:\n%s", text.stdout)
	}
	object := jsonOf(t, s.run(t, append([]string{"status", "--json"}, keys...)...).expect(t, exitOK, "status --json of a group's keys"))
	if object["one_holder"] != true || len(object["keys"].([]any)) != 2 {
		t.Errorf("status --json of a group's keys: %v", object)
	}

	// Two single locks on the same keys are held, but not by one lease.
	if err := group.Release(await.Context(t)); err != nil {
		t.Fatal(err)
	}
	s.hold(t, keys[0], 30*time.Second)
	s.run(t, append([]string{"status"}, keys...)...).expect(t, exitFree, "status of a held and a free key")
	s.hold(t, keys[1], 30*time.Second)
	object = jsonOf(t, s.run(t, append([]string{"status", "--json"}, keys...)...).expect(t, exitOK, "status --json of two single locks"))
	if object["one_holder"] != false {
		t.Errorf("two single locks read as one group: %v", object)
	}

	s.raw.Set(await.Context(t), "{order7}.note", "not a lock", 0)
	s.run(t, "status", keys[0], "{order7}.note").expect(t, exitForeign, "status of a held key and a foreign one")
	s.run(t, "status", keys[0], keys[0]).expect(t, exitUsage, "status of one key given twice")
}

// status --rw NAME reads a read/write lock: its readers while they hold
// it, its writer while it holds it; exit 3 when nobody does.
func TestStatusRWReadsReadersAndTheWriter(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rw, err := s.locker(t, setnxlock.WithTTL(30*time.Second)).RWLock("prices")
	if err != nil {
		t.Fatal(err)
	}
	free := jsonOf(t, s.run(t, "status", "--rw", "--json", "prices").expect(t, exitFree, "status --rw of an unused lock"))
	if free["name"] != "prices" || len(free["readers"].([]any)) != 0 {
		t.Errorf("status --rw of an unused lock: %v", free)
	}

	var readers []*setnxlock.Lock
	for range 2 {
		reader, err := rw.TryRLock(await.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, reader)
	}
	read := jsonOf(t, s.run(t, "status", "--rw", "--json", "prices").expect(t, exitOK, "status --rw with two readers"))
	if got := len(read["readers"].([]any)); got != 2 {
		t.Errorf("status --rw with two readers lists %d: %v", got, read)
	}
	if writer := read["writer"].(map[string]any); writer["held"] != false {
		t.Errorf("status --rw with readers only says a writer holds it: %v", read)
	}
	text := s.run(t, "status", "--rw", "prices").expect(t, exitOK, "status --rw with two readers, for people")
	if !strings.Contains(text.stdout, "prices: 2 readers") {
		t.Errorf("status --rw for people:\n%s", text.stdout)
	}

	for _, reader := range readers {
		if err := reader.Release(await.Context(t)); err != nil {
			t.Fatal(err)
		}
	}
	writer, err := rw.TryLock(await.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	written := jsonOf(t, s.run(t, "status", "--rw", "--json", "prices").expect(t, exitOK, "status --rw with a writer"))
	if w := written["writer"].(map[string]any); w["held"] != true || w["key"] != setnxlock.WriterKey("prices") || len(written["readers"].([]any)) != 0 {
		t.Errorf("status --rw with a writer: %v", written)
	}
	if err := writer.Release(await.Context(t)); err != nil {
		t.Fatal(err)
	}
	s.run(t, "status", "--rw", "prices").expect(t, exitFree, "status --rw once everyone left")
	s.run(t, "status", "--rw", "--match", "x*").expect(t, exitUsage, "status --rw with --match")
}
