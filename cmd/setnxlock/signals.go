package main

import (
	"os"
	"os/signal"
	"syscall"
)

// forwarded are the signals run catches: while waiting they end the wait,
// once the command runs they are sent on to its process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// catchSignals makes the forwarded signals arrive on sigs, except those
// ignored when setnxlock started (nohup, trap ” HUP, a script's
// background job): they stay ignored, are neither caught nor forwarded,
// and the command inherits them ignored, as with flock(1). Go reports that
// disposition only for SIGHUP and SIGINT (signal.Ignored); SIGTERM and
// SIGQUIT are always caught.
func catchSignals(sigs chan<- os.Signal) {
	for _, s := range forwarded {
		if !signal.Ignored(s) {
			signal.Notify(sigs, s)
		}
	}
}
