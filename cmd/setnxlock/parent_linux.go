package main

import (
	"os/exec"
	"runtime"
	"syscall"
)

// dieWithParent makes the kernel SIGKILL the command when setnxlock dies
// without cleaning up (SIGKILL, a crash): its lease ends by itself, and a
// command left running would overlap the next holder. Linux ties this to
// the forking thread, so the start runs on a locked thread that the Go
// runtime keeps afterwards (it ends threads only when a goroutine exits
// while locked to one).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// startCommand starts cmd on a thread that outlives it (see dieWithParent).
func startCommand(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}
