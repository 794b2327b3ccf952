//go:build !linux

package redisproc

import "os/exec"

// DieWithParent does nothing where the kernel has no parent-death signal:
// there a child killed with its parent's timeout may outlive the run.
func DieWithParent(cmd *exec.Cmd) {}
