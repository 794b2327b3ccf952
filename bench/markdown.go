package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/setnxlock/setnxlock"
)

// BENCHMARKS.md: how the numbers were measured, on what, and what each
// column means, around the tables.

// markdown is BENCHMARKS.md.
func (r *report) markdown() string {
	var b strings.Builder
	r.mdIntro(&b)
	r.mdMachine(&b)
	r.mdContenders(&b)
	r.mdThroughput(&b)
	r.mdCrash(&b)
	r.mdTargets(&b)
	return b.String()
}

// mdIntro is how the numbers were measured, and how to reproduce them.
func (r *report) mdIntro(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("# Benchmarks\n\n")
	p("Written by the program in [`bench/`](../bench) on %s; `make bench` rewrites this file and\n", r.env.date.Format(time.DateOnly))
	p("[`benchmarks.png`](benchmarks.png). Do not edit the numbers by hand.\n\n")
	p("One `redis-server` on a free loopback port, started by the program (`--save \"\" --appendonly no`),\n")
	p("serves every contender in turn. Each library runs %v per case in each of %d rounds; rounds\n", r.cfg.duration, r.cfg.rounds)
	p("reverse the libraries' order, so that drift on a shared machine hits all of them alike.\n")
	p("A row's **cycles/s is the median of its %d rounds' cycles/s**, and every ratio below (× raw, × ceiling, × floor,\n", r.cfg.rounds)
	p("the targets) is a ratio of those medians. Latency percentiles pool the recorded cycles of all rounds; commands,\n")
	p("round trips, CPU time and allocations are totals over all rounds per total acquisitions or cycles.\n\n")
	p("**Round trip (RTT): %s.** Before each case's runs in every round, a go-redis client of its own sends\n", r.rttSummary())
	p("a burst of sequential `PING`s (%s per round in all); a round's RTT is the median of its `PING`s, and the RTT used\n", fmtCount(pingsPerRound))
	p("below is the median over the rounds.\n\n")

	p("## Reproduce\n\n```sh\n%s\n```\n\n", r.cfg.command())
	p("from the repository root; `make bench` runs the Go benchmarks of the root package and then\n")
	p("this program with `-out=../docs`.\n\n")
}

// mdMachine is the machine and the versions measured.
func (r *report) mdMachine(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Machine and versions\n\n")
	p("| | |\n|---|---|\n")
	p("| CPU | %s, %d logical CPUs, GOMAXPROCS %d |\n", r.env.cpu, r.env.cpus, r.env.gomaxprocs)
	p("| OS | %s, kernel %s |\n", r.env.osArch, r.env.kernel)
	p("| Go | %s, no race detector |\n", r.env.goVersion)
	p("| redis-server | %s |\n", r.env.redis)
	p("| setnxlock | %s |\n", r.env.setnxlock)
	for _, m := range reportedModules {
		if v, ok := r.env.modules[m]; ok {
			p("| %s | %s |\n", m, v)
		}
	}
	p("| run took | %s |\n\n", r.env.took.Round(time.Second))
}

// mdContenders is the libraries and how each is configured.
func (r *report) mdContenders(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Contenders\n\n")
	p("Every polling contender retries after the same fixed delay, %v. ", r.cfg.retry)
	p("Each worker has its own go-redis client (default options) and its own locker, like a separate process, except in\n")
	p("the case **%s**, where the workers are goroutines of one process that share one\n", r.caseTitle(caseShared))
	p("client and one locker: one `setnxlock.Locker`, one `redislock.Client`, one `Redsync` (a `Mutex` per goroutine), one client\n")
	p("for the raw loop.\n")
	p("Throughput cases use a %v lease; nobody's lease expires during them.\n\n", r.cfg.ttl)
	p("| library | configuration |\n|---|---|\n")
	for _, lib := range r.rs.libs {
		p("| %s | %s |\n", lib.name, lib.config)
	}
	p("\nThe targets name their row; \"default\" is the **%s** row: the library's default mode with the peers' retry settings.\n", nameSetnx)
	p("The **setnxlock default backoff** row keeps the library's own backoff (%v doubling to %v), to show\n", setnxlock.DefaultMinBackoff, setnxlock.DefaultMaxBackoff)
	p("how much of the handover depends on polling: a waiter that is woken when the lock is released does not need a short\n")
	p("retry delay, and then the two rows should agree.\n\n")
}

// mdThroughput is the throughput table and what each column means.
func (r *report) mdThroughput(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Results\n\n![cycles per second per case and library](benchmarks.png)\n\n")
	p("### Throughput\n\n")
	b.WriteString(r.throughputTable().markdown())
	p("\n- **cycles/s**: acquire + hold + release cycles completed by all workers per second of wall time.\n")
	p("- **× raw**, **× ceiling**: the row's cycles/s over the raw `SETNX`+`DEL` loop's, and over the in-process ceiling's, in the same case:\n")
	p("  `sync.Mutex`, or in the semaphore case `golang.org/x/sync/semaphore.Weighted` of as many permits (weight 1 per cycle),\n")
	p("  or in the read/write case `sync.RWMutex`, read or written in the same share of cycles.\n")
	p("- **floor**: the most cycles/s the round trips allow, with the RTT above: 1 / (2 RTT) for one worker, whose acquire\n")
	p("  and release are a round trip each; 1 / (hold + RTT) under contention, where cycles overlap except for the hold and\n")
	p("  one round trip per handoff (the winner's reply reaching it, its release reaching the server); a semaphore's permits\n")
	p("  turn over side by side, so its floor is that many times the lock's. The hold is nominal:\n")
	p("  `time.Sleep` sleeps a little longer, which the sync.Mutex ceiling pays as well. **× floor**: cycles/s over the floor.\n")
	p("- **wait**: from calling acquire to its return, every recorded cycle (the first %s cycles of each run).\n", fmtCount(float64(r.cfg.maxSamples)))
	p("- **handoff**: from one holder's release call returning to the next holder's acquire returning, when the next\n")
	p("  holder is another worker. It is negative when the next holder's acquire returned before the releaser read the clock:\n")
	p("  its reply arrived first, or the releaser was descheduled in between (for sync.Mutex at 0 ms hold, where the\n")
	p("  lock passes to another worker almost only when its holder is preempted, that is most of the samples). Not measured\n")
	p("  in the semaphore and read/write cases, where holders of different permits, or readers, overlap.\n")
	p("- **handoff p50 (RTTs)**: handoff p50 over the RTT. Measured between the two clients' returns as above, a handoff\n")
	p("  costs about 0 RTT when the server passes the lock on in the release's own step and the reply and the notice travel\n")
	p("  together, and at least 1 RTT when the next holder must first hear of the release and then ask for the lock.\n")
	p("- **same worker**: the share of cycles in which the worker that just released took the lock again.\n")
	p("- **cmds/acq**: Redis commands per acquisition from `INFO commandstats` (reset with `CONFIG RESETSTAT` before each\n")
	p("  run): failed attempts, releases and the commands scripts run inside `EVAL`/`EVALSHA` all count; the benchmark's own\n")
	p("  `INFO`/`CONFIG` and go-redis's connection handshake (`HELLO`, `CLIENT SETINFO`) do not.\n")
	p("- **trips/acq**: writes by the workers' clients to the server per acquisition, counted by a wrapper around\n")
	p("  each TCP connection: one per command, pipeline or `MULTI`…`EXEC` block, so round trips; a script is one, whatever it\n")
	p("  runs inside. Pub/sub `SUBSCRIBE`s count too.\n")
	p("- **srv µs/acq**: the server's CPU time per acquisition: its main thread's user + system time (`used_cpu_user_main_thread`\n")
	p("  + `used_cpu_sys_main_thread` of `INFO cpu`) over the run, which does all the work with I/O threads off (the default):\n")
	p("  commands, scripts, parsing and socket I/O, each counted once, and the server's own few housekeeping ticks.\n")
	p("- **cmd µs/acq**: the `usec` fields of `INFO commandstats` summed, per acquisition: time spent running commands only,\n")
	p("  no parsing or I/O. Redis counts a command that a script runs in its own `usec` and again inside the script's, so this\n")
	p("  sum counts scripts' inner commands twice; the server-CPU target is judged on srv µs/acq, which counts them once.\n")
	p("- **allocs/cycle**: `runtime.MemStats.Mallocs` over the run divided by cycles: the whole process, every worker's\n")
	p("  client included, so it also counts allocations spent on failed attempts while waiting.\n\n")
}

// mdCrash is the crash-recovery table and how recovery is measured.
func (r *report) mdCrash(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("### Crash recovery\n\n")
	p("A holder acquires a fresh key with a %v lease and never releases it; a waiter with its own client calls the\n", r.cfg.crashTTL)
	p("blocking acquire at once. **recovery** runs from the lease's end to the waiter's acquire returning. The lease's\n")
	p("end is `Lock.ExpiresAt()` for setnxlock (stored at millisecond resolution, rounded down) and the holder's acquire call's\n")
	p("start plus the TTL for bsm/redislock and redsync, the earliest instant their key's `PX` expiry can pass.\n")
	p("cmds/acq, trips/acq and allocs/acq count the holder's and the waiter's acquisitions, and all the waiter's polling.\n\n")
	b.WriteString(r.crashTable().markdown())
}

// mdTargets is the targets, the command mix, the errors of the run and
// the closing caveat.
func (r *report) mdTargets(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## Targets (issue 24)\n\n")
	p("Issue 24's targets, each computed from the tables above: ratios of rows of this one run, cycles/s the median of its\n")
	p("%d rounds, which alternate the contenders' order; RTT is the run's. A target reads \"case: row, measure vs base row's\".\n", r.cfg.rounds)
	p("**commands/cycle** is commands per acquire + release cycle, counted as cmds/acq counts them and on both rows alike; in\n")
	p("the uncontended case one acquisition is one cycle, so it equals the cmds/acq column. A target whose numbers the run\n")
	p("lacks (a row not run or failed, no samples, no counts) is NOT MEASURED, never MET. \"Ahead\" means strictly more\n")
	p("cycles/s than both peers (a lower recovery p50 in the crash case) in every case of the benchmark.\n\n")
	if prov := r.provisional(); prov != "" {
		p("**%s**\n\n", prov)
	}
	b.WriteString(r.targetTable().markdown())

	p("\n## Commands per acquisition, by command\n\n")
	b.WriteString(r.commandMixTable(caseUncontended, caseW8Hold1ms, caseShared).markdown())

	if notes := r.notes(); len(notes) > 0 {
		p("\n## Errors during the run\n\n")
		for _, n := range notes {
			p("- %s\n", n)
		}
	}
	p("\nA 2-core machine shared with other work makes these numbers noisy, the contended ones most: compare rows of one run,\n")
	p("not runs of different days.\n")
}
