package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
)

// subreaperEnv, set by the wrapper underSubreaper, makes this test binary
// exec setnxlock as a child subreaper (PR_SET_CHILD_SUBREAPER, kept across
// exec): the processes its command orphans become its children, and, as Go
// reaps only the children it started, they stay zombies while it runs, as
// under a container's init that does not reap.
const subreaperEnv = "SETNXLOCK_TEST_SUBREAPER"

// underSubreaper is a startVia wrapper that runs setnxlock as such a
// subreaper.
var underSubreaper = []string{"env", subreaperEnv + "=1", os.Args[0]}

// execAsSubreaper runs in place of the tests when subreaperEnv is set: it
// becomes a subreaper and execs its arguments, setnxlock's argv.
func execAsSubreaper() {
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", errno)
		os.Exit(1)
	}
	env := slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, subreaperEnv+"=") })
	err := syscall.Exec(os.Args[1], os.Args[1:], env)
	fmt.Fprintln(os.Stderr, "exec", os.Args[1], err)
	os.Exit(1)
}
