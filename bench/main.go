// Command bench measures setnxlock against a raw SETNX+DEL loop,
// bsm/redislock, redsync and an in-process sync.Mutex, on one redis-server
// it starts itself, and writes docs/BENCHMARKS.md and docs/benchmarks.png.
//
//	cd bench && go run . -out ../docs
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// config is the run's settings, all from flags.
type config struct {
	duration   time.Duration // one run of one library in one case
	rounds     int           // runs per library and case, in alternating order
	retry      time.Duration // every polling contender's fixed retry delay
	ttl        time.Duration // lease length in the throughput cases
	crashTTL   time.Duration // lease length in the crash case
	maxSamples int           // cycles recorded per run for latencies
	out        string        // directory for BENCHMARKS.md and benchmarks.png; "" writes nothing
	cases      string        // comma-separated case ids to run; "" runs all
	libs       string        // comma-separated substrings of library names; "" runs all
}

// defaultConfig is what `go run .` measures.
func defaultConfig() config {
	return config{
		duration: time.Second, rounds: 5, retry: time.Millisecond, ttl: 10 * time.Second,
		crashTTL: 100 * time.Millisecond, maxSamples: 1 << 20,
	}
}

// parseFlags reads the command line into a config.
func parseFlags(args []string, errOut io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "length of one run of one library in one case")
	fs.IntVar(&cfg.rounds, "rounds", cfg.rounds, "runs per library and case; rounds alternate the libraries' order, and cycles/s is their median")
	fs.DurationVar(&cfg.retry, "retry", cfg.retry, "fixed retry delay of every polling contender")
	fs.DurationVar(&cfg.ttl, "ttl", cfg.ttl, "lease length in the throughput cases")
	fs.DurationVar(&cfg.crashTTL, "crash-ttl", cfg.crashTTL, "lease length of the crashed holder in the crash case")
	fs.IntVar(&cfg.maxSamples, "max-samples", cfg.maxSamples, "cycles per run whose latencies are recorded")
	fs.StringVar(&cfg.out, "out", cfg.out, "directory to write BENCHMARKS.md and benchmarks.png into (empty: none)")
	fs.StringVar(&cfg.cases, "cases", cfg.cases, "comma-separated case ids to run (empty: all)")
	fs.StringVar(&cfg.libs, "libs", cfg.libs, "comma-separated substrings of library names to run (empty: all)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case cfg.duration <= 0, cfg.rounds < 1, cfg.retry <= 0, cfg.ttl < time.Millisecond,
		cfg.crashTTL < time.Millisecond, cfg.maxSamples < 2:
		return cfg, fmt.Errorf("out-of-range flag: duration, rounds, retry, ttl, crash-ttl and max-samples must be positive")
	}
	return cfg, nil
}

// command is the command line that reproduces cfg, run from the
// repository root.
func (cfg config) command() string {
	args := []string{"cd bench && go run .",
		"-duration=" + cfg.duration.String(), fmt.Sprintf("-rounds=%d", cfg.rounds),
		"-retry=" + cfg.retry.String(), "-ttl=" + cfg.ttl.String(), "-crash-ttl=" + cfg.crashTTL.String()}
	if cfg.cases != "" {
		args = append(args, "-cases="+cfg.cases)
	}
	if cfg.libs != "" {
		args = append(args, "-libs="+cfg.libs)
	}
	if cfg.out != "" {
		args = append(args, "-out="+cfg.out)
	}
	return strings.Join(args, " ")
}

// selected filters the cases and libraries by the -cases and -libs flags.
func (cfg config) selected(cs []caseSpec, libs []*library) ([]caseSpec, []*library) {
	var outC []caseSpec
	for _, c := range cs {
		if cfg.cases == "" || slices.Contains(strings.Split(cfg.cases, ","), c.id) {
			outC = append(outC, c)
		}
	}
	var outL []*library
	for _, l := range libs {
		keep := cfg.libs == ""
		for sub := range strings.SplitSeq(cfg.libs, ",") {
			keep = keep || (sub != "" && strings.Contains(l.name, sub))
		}
		if keep {
			outL = append(outL, l)
		}
	}
	return outC, outL
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	rs, env, err := run(cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	rep := newReport(rs, env, cfg)
	fmt.Print(rep.text())
	if cfg.out != "" {
		if err := rep.write(cfg.out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Printf("\nwrote %s and %s\n", docPath(cfg.out), chartPath(cfg.out))
	}
}

// run starts the server and measures every selected library in every
// selected case, round after round, reversing the libraries' order on
// every other round so that drift on a shared machine hits all alike.
// Before each case's runs, a burst of PINGs measures the round trip, so
// that the round's round-trip time is sampled across the round too.
func run(cfg config, progress io.Writer) (*results, environment, error) {
	bin, err := findServer()
	if err != nil {
		return nil, environment{}, err
	}
	srv, err := startServer(bin)
	if err != nil {
		return nil, environment{}, err
	}
	defer srv.stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer func() { _ = admin.Close() }()
	env := collectEnvironment(context.Background(), admin)

	probe, err := newRTTProbe(srv.addr)
	if err != nil {
		return nil, environment{}, err
	}
	defer func() { _ = probe.close() }()

	cs, libs := cfg.selected(cases(), libraries(cfg.retry))
	rs := newResults(cs, libs)
	h := &harness{addr: srv.addr, admin: admin, cfg: cfg, buf: make([]record, cfg.maxSamples)}
	pings := (pingsPerRound + len(cs) - 1) / max(len(cs), 1)
	started := time.Now()
	for round := range cfg.rounds {
		for _, c := range cs {
			if err := probe.burst(pings); err != nil {
				return nil, environment{}, err
			}
			order := slices.Clone(libs)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, lib := range order {
				if !c.runs(lib) {
					continue
				}
				h.measure(rs, lib, c, round, progress)
			}
		}
		rtt := probe.endRound()
		rs.rtts = append(rs.rtts, rtt)
		fmt.Fprintf(progress, "round %d/%d  RTT (median PING) %v\n", round+1, cfg.rounds, rtt)
	}
	for _, r := range rs.by {
		r.finish()
	}
	env.took = time.Since(started)
	return rs, env, nil
}

// measure makes one run of lib in case c, adds what it measured to rs,
// and says so on progress: a run that failed counts an error, one that
// completed no cycle has errNoSamples as its first error.
func (h *harness) measure(rs *results, lib *library, c caseSpec, round int, progress io.Writer) {
	var res runResult
	var err error
	if c.crash {
		res, err = h.runCrash(lib, c, round)
	} else {
		res, err = h.runThroughput(lib, c, round)
	}
	if err != nil {
		res.errors++
		res.firstErr = err
	} else if res.cycles == 0 {
		res.firstErr = errNoSamples
	}
	rs.add(c, lib, res)
	fmt.Fprintf(progress, "round %d/%d  %-18s %-26s %8d cycles  %s\n",
		round+1, h.cfg.rounds, c.id, lib.name, res.cycles, errText(res.firstErr))
}

// errText is err's message, or nothing.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return "error: " + err.Error()
}
