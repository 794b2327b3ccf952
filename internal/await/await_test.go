package await

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of ending the
// test, so the tests can see a wait fail.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestAWaitThatTimesOutFailsTheTestSayingWhat(t *testing.T) {
	r := &recorder{TB: t}
	got := RecvWithin(r, make(chan int), 10*time.Millisecond, "the %s", "release")
	if got != 0 || !strings.Contains(r.failed, "the release did not happen within 10ms") {
		t.Fatalf("a receive that never happened returned %d and failed=%q", got, r.failed)
	}
}

func TestAWaitThatSucceedsReturnsTheValue(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Recv(t, ch, "a value"); got != 7 {
		t.Fatalf("got %d", got)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go wg.Done()
	Group(t, &wg, "the goroutine")
	if _, ok := Context(t).Deadline(); !ok {
		t.Fatal("await.Context has no deadline")
	}
}

func TestAGroupThatOutlastsItsOwnDeadlineFailsTheTestSayingWhat(t *testing.T) {
	r := &recorder{TB: t}
	var wg sync.WaitGroup
	wg.Add(1)
	defer wg.Done()
	GroupWithin(r, &wg, 10*time.Millisecond, "the %s", "workers")
	if !strings.Contains(r.failed, "the workers did not happen within 10ms") {
		t.Fatalf("a group that never finished failed=%q", r.failed)
	}
}
