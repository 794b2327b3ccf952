// Command chaos runs the setnxlock fault-injection harness (internal/chaos)
// and prints what it found. Its last line is
//
//	chaos: acquisitions=N faults=M violations=V recovered_p99=D
//
// Under the README's assumptions (the default) it exits 1 when V > 0. With
// -break it runs with one assumption broken and exits 1 when V == 0: the
// checker must catch the broken assumption.
//
//	go run ./internal/chaos/cmd/chaos                        # make chaos
//	go run ./internal/chaos/cmd/chaos -duration 10m -acquisitions 0   # make soak
//	go run ./internal/chaos/cmd/chaos -break skew -acquisitions 2000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/setnxlock/setnxlock/internal/chaos"
)

func main() {
	cfg := chaos.DefaultConfig()
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of every random decision of the run")
	flag.IntVar(&cfg.Acquisitions, "acquisitions", cfg.Acquisitions, "stop after this many acquisitions (0: no limit)")
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "stop after this long at most")
	flag.IntVar(&cfg.Goroutines, "clients", cfg.Goroutines, "lock clients as goroutines of this process")
	flag.IntVar(&cfg.Procs, "procs", cfg.Procs, "lock clients as OS processes (killed with SIGKILL, paused with SIGSTOP)")
	flag.IntVar(&cfg.Keys, "keys", cfg.Keys, "lock keys")
	flag.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "lease length")
	flag.DurationVar(&cfg.Skew, "skew", cfg.Skew, "largest disagreement between two clients' clocks")
	flag.DurationVar(&cfg.Margin, "margin", cfg.Margin, "WithSkewMargin; the assumption is skew <= margin")
	flag.IntVar(&cfg.RestartEvery, "restart-every", cfg.RestartEvery, "acquisitions between redis-server restarts, give or take half (0: never)")
	breakFlag := flag.String("break", "", "break one assumption: "+strings.Join(chaos.Breaks, "|"))
	quiet := flag.Bool("q", false, "no progress lines")
	dump := flag.String("history", "", "write the recorded history and report as JSON to this file, to study a violation")
	flag.Parse()
	if *breakFlag != "" {
		if err := cfg.Break(*breakFlag); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if !*quiet {
		cfg.Log = os.Stderr
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *dump != "" {
		data, err := json.MarshalIndent(struct {
			History chaos.History
			Report  chaos.Report
		}{res.History, res.Report}, "", " ")
		if err == nil {
			err = os.WriteFile(*dump, data, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	fmt.Print(res.Details())
	fmt.Println(res.Summary())
	violations := len(res.Report.Violations)
	switch {
	case *breakFlag == "" && violations > 0:
		os.Exit(1)
	case *breakFlag != "" && violations == 0:
		fmt.Fprintf(os.Stderr, "chaos: assumption %q broken but no violation found\n", *breakFlag)
		os.Exit(1)
	}
}
