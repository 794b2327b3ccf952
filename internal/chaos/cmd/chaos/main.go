// Command chaos runs the setnxlock fault-injection harness (internal/chaos)
// in each mode the library ships and prints what it found. Each mode ends
// with one line that scripts read:
//
//	chaos: mode=<name> acquisitions=<n> faults=<n> violations=<n> recovered_p99=<dur> longest_free_wait=<dur>
//
// Under the README's assumptions (the default) it exits 1 when any mode
// shows a violation. With -break it runs with one assumption broken and
// exits 1 when a mode shows none: the checkers must catch it. With
// -broken it runs, after the modes, the runs of chaos.BrokenRuns (of the
// mode asked for), each with an assumption broken, for
// -broken-acquisitions each (or the run's MinAcquisitions), and exits 1 unless each is caught by both
// checkers (and, with fencing, by the fenced resource).
//
//	go run ./cmd/chaos                                   # make chaos: every mode, then the broken runs
//	go run ./cmd/chaos -mode default                     # make chaos MODE=default
//	go run ./cmd/chaos -mode default -break owner-check -acquisitions 1000
//	go run ./cmd/chaos -duration 10m -acquisitions 0     # make soak
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/setnxlock/setnxlock/internal/chaos"
)

// options are the command's flags.
type options struct {
	mode               string
	seed               uint64
	acquisitions       int
	duration           time.Duration
	breakFlag          string
	broken             bool
	brokenAcquisitions int
	quiet              bool
	dump               string
	recheck            string
}

// parseFlags reads the command line.
func parseFlags() options {
	def := chaos.DefaultConfig(chaos.ModeDefault)
	var o options
	flag.StringVar(&o.mode, "mode", "all", "the mode to run, or all: "+strings.Join(chaos.Modes, ", "))
	flag.Uint64Var(&o.seed, "seed", def.Seed, "seed of every random decision of the run")
	flag.IntVar(&o.acquisitions, "acquisitions", def.Acquisitions, "stop each mode after this many acquisitions (0: no limit)")
	flag.DurationVar(&o.duration, "duration", 0, fmt.Sprintf("stop each mode after this long at most (0: the mode's own limit, %s in most)", def.Duration))
	flag.StringVar(&o.breakFlag, "break", "", "break one assumption in every mode run: "+strings.Join(chaos.Breaks, "|"))
	flag.BoolVar(&o.broken, "broken", false, "after the modes, run each with an assumption broken (chaos.BrokenRuns) and check that each is caught")
	flag.IntVar(&o.brokenAcquisitions, "broken-acquisitions", 500, "acquisitions of each broken run")
	flag.BoolVar(&o.quiet, "q", false, "no progress lines")
	flag.StringVar(&o.dump, "history", "", "write each mode's history and report as JSON into this directory (always for a mode with violations, into "+os.TempDir()+" when unset)")
	flag.StringVar(&o.recheck, "recheck", "", "check a history saved by -history again, with both checkers, and print the report")
	flag.Parse()
	return o
}

func main() {
	o := parseFlags()
	if o.recheck != "" {
		exitIf(recheckFile(o.recheck))
		return
	}
	modes := chaos.Modes
	if o.mode != "all" {
		modes = []string{o.mode}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := os.MkdirTemp("", "setnxlock-chaos-clients-")
	exitIf(err)
	defer os.RemoveAll(dir)
	binaries := map[string]string{}
	binary := func(tags string) string {
		if binaries[tags] == "" {
			bin, err := chaos.BuildClient(dir, tags)
			exitIf(err)
			binaries[tags] = bin
		}
		return binaries[tags]
	}

	start := time.Now()
	// failures are repeated at the end, where a log cut to its tail still
	// shows them; there are some exactly when a run failed.
	failures := o.runModes(ctx, modes, binary)
	if o.broken {
		failures = append(failures, o.runBroken(ctx, binary)...)
	}
	fmt.Printf("chaos: %d mode(s) in %s\n", len(modes), time.Since(start).Round(time.Second))
	if len(failures) > 0 {
		for i, f := range failures {
			if i == 20 {
				fmt.Printf("chaos: FAILED: ... and %d more\n", len(failures)-i)
				break
			}
			fmt.Printf("chaos: FAILED: %s\n", f)
		}
		os.Exit(1)
	}
}

// runModes runs each mode, with an assumption broken when -break says so,
// and returns what failed: a violation under the assumptions, or none with
// one broken.
func (o options) runModes(ctx context.Context, modes []string, binary func(tags string) string) (failures []string) {
	for _, m := range modes {
		cfg := chaos.DefaultConfig(m)
		cfg.Seed, cfg.Acquisitions = o.seed, o.acquisitions
		if o.duration > 0 {
			cfg.Duration = o.duration
		}
		if o.breakFlag != "" {
			exitIf(cfg.Break(o.breakFlag))
		}
		if !o.quiet {
			cfg.Log = os.Stderr
		}
		cfg.ClientBinary = binary(cfg.ClientTags)
		res, err := chaos.Run(ctx, cfg)
		exitIf(err)
		violations := len(res.Report.Violations)
		if o.dump != "" || (violations > 0) != (o.breakFlag != "") {
			save(o.dump, res)
		}
		fmt.Print(res.Details())
		fmt.Println(res.Summary())
		switch {
		case o.breakFlag == "" && violations > 0:
			for _, v := range res.Report.Violations {
				failures = append(failures, fmt.Sprintf("mode %s: %s", m, v))
			}
		case o.breakFlag != "" && violations == 0:
			failures = append(failures, fmt.Sprintf("mode %s: assumption %q broken but no violation found", m, o.breakFlag))
		}
	}
	return failures
}

// runBroken makes the runs of chaos.BrokenRuns (of the mode asked for) and
// returns those that a checker that should have caught missed.
func (o options) runBroken(ctx context.Context, binary func(tags string) string) (failures []string) {
	for _, run := range chaos.BrokenRuns {
		if m, b := run.Mode, run.Assumption; o.mode == "all" || o.mode == m {
			cfg := chaos.DefaultConfig(m)
			cfg.Seed, cfg.Acquisitions = o.seed, max(o.brokenAcquisitions, run.MinAcquisitions)
			if o.duration > 0 {
				cfg.Duration = o.duration
			}
			exitIf(cfg.Break(b))
			cfg.ClientBinary = binary(cfg.ClientTags)
			res, err := chaos.Run(ctx, cfg)
			exitIf(err)
			caught, missing := chaos.Caught(res)
			fmt.Printf("chaos: broken mode=%s assumption=%s acquisitions=%d caught-by=%s missed-by=%s violations=%d\n",
				m, b, res.Report.Acquisitions, join(caught), join(missing), len(res.Report.Violations))
			if len(missing) > 0 {
				save(o.dump, res)
				failures = append(failures, fmt.Sprintf("broken mode %s assumption %s: missed by %s", m, b, join(missing)))
			}
		}
	}
	return failures
}

func join(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

// saved is what save writes.
type saved struct {
	Config    chaos.Config
	History   chaos.History
	Report    chaos.Report
	Linearity chaos.Linearity
	Final     chaos.Final
}

// recheckFile runs both checkers again on a saved history.
func recheckFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var s saved
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	res := chaos.Recheck(s.Config, s.History)
	res.Final, res.Elapsed = s.Final, s.History.End.Sub(firstGrant(s.History))
	fmt.Print(res.Details())
	fmt.Println(res.Summary())
	return nil
}

func firstGrant(h chaos.History) time.Time {
	if len(h.Acquisitions) == 0 {
		return h.End
	}
	return h.Acquisitions[0].Granted
}

// save writes a run's history and report as JSON into dir (or the
// temporary directory) and says where.
func save(dir string, res *chaos.Result) {
	if dir == "" {
		dir = os.TempDir()
	}
	tag := ""
	if res.Config.ClientTags != "" || res.Config.Persistence != chaos.DefaultConfig(res.Config.Mode).Persistence {
		tag = "-broken"
	}
	path := filepath.Join(dir, fmt.Sprintf("chaos-%s-seed%d%s.json", res.Config.Mode, res.Config.Seed, tag))
	data, err := json.MarshalIndent(saved{res.Config, res.History, res.Report, res.Linearity, res.Final}, "", " ")
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: save history:", err)
		return
	}
	fmt.Fprintf(os.Stderr, "chaos: %s history written to %s\n", res.Config.Mode, path)
}

func exitIf(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
