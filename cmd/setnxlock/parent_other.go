//go:build !linux

package main

import "os/exec"

// dieWithParent has no equivalent outside Linux: a command whose setnxlock
// was SIGKILLed runs on without the lock.
func dieWithParent(*exec.Cmd) {}

func startCommand(cmd *exec.Cmd) error { return cmd.Start() }
