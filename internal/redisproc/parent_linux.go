package redisproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes the kernel send SIGKILL to cmd's process when the
// process that starts it dies, however it dies (go test's timeout panic,
// SIGKILL, SIGINT), so that no child outlives a test run. Linux ties this
// to the thread that forks; the Go runtime keeps its threads for the life
// of the process unless a goroutine locked to one exits, which nothing
// that starts processes here does.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
