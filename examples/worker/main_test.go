package main

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// With the lock, no increment is lost.
func TestLockedWorkersLoseNoUpdate(t *testing.T) {
	server := miniredis.RunT(t)
	got, _, err := count(server.Addr(), 4, 25, true)
	if err != nil {
		t.Fatal(err)
	}
	if got != 100 {
		t.Fatalf("counter = %d, want 100", got)
	}
}
