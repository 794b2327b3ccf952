package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The demo must tell the whole story: refused while the lease is live,
// recovered with GETSET after it, released.
func TestDemoRecoversTheKilledHoldersLock(t *testing.T) {
	out, err := exec.Command("go", "run", ".", "-ttl", "300ms", "-addr", "").CombinedOutput()
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"killed with SIGKILL",
		"refused",
		"MULTI GETSET EXEC -> old value still expired",
		"lock recovered",
		"released",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}
