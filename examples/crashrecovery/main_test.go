package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The demo must tell the whole story: refused while the lease is live (the
// queued wait's polls included), recovered with GETSET after it, released
// by a watched delete.
func TestDemoRecoversTheKilledHoldersLock(t *testing.T) {
	out, err := exec.Command("go", "run", ".", "-ttl", "300ms", "-addr", "").CombinedOutput()
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"killed with SIGKILL",
		"refused",
		"attempts refused while the lease was live",
		"lease expired",
		"the holder is gone",
		"WATCH lock.demo.report, GET -> still the expired value",
		"MULTI GETSET EXEC -> old value still expired",
		"lock recovered",
		"WATCH lock.demo.report, GET -> our own value",
		"released",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}
