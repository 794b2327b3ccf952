// Command chaosclient is one lock client of the fault-injection harness
// (internal/chaos), run as an OS process so that the harness can kill it
// with SIGKILL and pause it with SIGSTOP. The harness builds it and passes
// every setting as flags; it runs until the harness hangs up or kills it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/setnxlock/setnxlock/internal/chaos"
)

func main() {
	cfg, err := chaos.ParseWorkerArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := chaos.RunWorker(ctx, cfg); err != nil && !chaos.HungUp(err) {
		fmt.Fprintf(os.Stderr, "chaosclient %s: %v\n", cfg.Name, err)
		os.Exit(1)
	}
}
