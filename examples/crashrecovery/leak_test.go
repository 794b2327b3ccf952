package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind, as every
// package's tests in this module do: an example that leaks a client or a
// server teaches its readers to leak them too.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
