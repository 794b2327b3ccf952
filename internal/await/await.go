// Package await bounds every wait in the project's tests. Each helper
// waits at most a deadline and then fails the test saying what did not
// happen, so that a broken test fails in seconds with a message instead of
// hanging until go test's timeout. internal/testrules checks that the tests
// wait through it (or through a select with a timer).
package await

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Timeout is how long a wait lasts when the caller gives no deadline of
// its own: far longer than anything a passing test waits for, even under
// the race detector on a loaded machine, and far shorter than go test's
// -timeout, so that a stuck wait is reported by name.
const Timeout = 20 * time.Second

// Recv returns the next value from ch, failing the test if none arrives
// within Timeout. what says what was expected ("the holder's release").
func Recv[T any](tb testing.TB, ch <-chan T, what string, args ...any) T {
	tb.Helper()
	return RecvWithin(tb, ch, Timeout, what, args...)
}

// RecvWithin is Recv with a deadline of d.
func RecvWithin[T any](tb testing.TB, ch <-chan T, d time.Duration, what string, args ...any) T {
	tb.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		tb.Fatalf("await: %s did not happen within %v", fmt.Sprintf(what, args...), d)
		var zero T
		return zero
	}
}

// Group waits for wg, failing the test if it is not done within Timeout.
func Group(tb testing.TB, wg *sync.WaitGroup, what string, args ...any) {
	tb.Helper()
	GroupWithin(tb, wg, Timeout, what, args...)
}

// GroupWithin is Group with a deadline of d, for a group whose work is
// sized by the test (thousands of cycles) rather than a single event.
func GroupWithin(tb testing.TB, wg *sync.WaitGroup, d time.Duration, what string, args ...any) {
	tb.Helper()
	DoWithin(tb, wg.Wait, d, what, args...)
}

// Do runs fn and waits for it to return, failing the test if it has not
// within Timeout. fn then goes on running in the background: the test has
// already failed, and its goroutine shows in go test's leak report.
func Do(tb testing.TB, fn func(), what string, args ...any) {
	tb.Helper()
	DoWithin(tb, fn, Timeout, what, args...)
}

// DoWithin is Do with a deadline of d.
func DoWithin(tb testing.TB, fn func(), d time.Duration, what string, args ...any) {
	tb.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	RecvWithin(tb, done, d, what, args...)
}

// Context returns a context that ends Timeout from now, or when the test
// ends: for calls that wait as long as their context lets them (Acquire),
// so that a test that should have seen them return fails instead of
// hanging.
func Context(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	tb.Cleanup(cancel)
	return ctx
}
