//go:build !linux

package main

import (
	"fmt"
	"os"
)

const subreaperEnv = "SETNXLOCK_TEST_SUBREAPER"

// underSubreaper needs Linux's PR_SET_CHILD_SUBREAPER: elsewhere the
// wrapper fails, and so does the test that uses it.
var underSubreaper = []string{"env", subreaperEnv + "=1", os.Args[0]}

func execAsSubreaper() {
	fmt.Fprintln(os.Stderr, "a child subreaper needs Linux")
	os.Exit(1)
}
