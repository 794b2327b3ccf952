package main

import (
	"errors"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every case for every library, the shared-Locker case
// included, with tiny durations and checks that each produced numbers, the
// round trip and the server's CPU time among them, that the report shows
// them, and that both files were written. It is skipped without
// redis-server, except under CI=true, where that fails.
func TestSmoke(t *testing.T) {
	if _, err := findServer(); errors.Is(err, errNoServer) {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cfg := defaultConfig()
	cfg.duration, cfg.rounds, cfg.crashTTL, cfg.maxSamples = 150*time.Millisecond, 1, 30*time.Millisecond, 1<<14
	if testing.Short() {
		cfg.duration = 60 * time.Millisecond
	}
	cfg.out = t.TempDir()

	rs, env, err := run(cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rs.cases {
		for _, lib := range rs.libs {
			if !c.runs(lib) {
				continue
			}
			res := rs.get(c.id, lib.name)
			switch {
			case !res.ok():
				t.Errorf("%s, %s: no cycles", c.id, lib.name)
				continue
			case res.violations > 0:
				t.Errorf("%s, %s: mutual exclusion violated %d times", c.id, lib.name, res.violations)
			case len(res.waits) == 0:
				t.Errorf("%s, %s: no acquire waits recorded", c.id, lib.name)
			case lib.redis && res.commandsPerAcquisition() < 1:
				t.Errorf("%s, %s: %.2f commands per acquisition", c.id, lib.name, res.commandsPerAcquisition())
			case (c.crash || c.workers > 1) && !c.overlapping() && lib.redis && len(res.handoffs) == 0:
				t.Errorf("%s, %s: no handoffs recorded", c.id, lib.name)
			case !c.crash && lib.redis && (res.serverMicrosPerAcquisition() <= 0 || res.commandMicrosPerAcquisition() <= 0):
				t.Errorf("%s, %s: server CPU %.2f µs/acq, commands %.2f µs/acq", c.id, lib.name,
					res.serverMicrosPerAcquisition(), res.commandMicrosPerAcquisition())
			case len(res.rates) != cfg.rounds:
				t.Errorf("%s, %s: %d rates for %d rounds", c.id, lib.name, len(res.rates), cfg.rounds)
			}
			if res.firstErr != nil {
				t.Logf("%s, %s: %d errors, first: %v", c.id, lib.name, res.errors, res.firstErr)
			}
		}
	}

	if !slices.ContainsFunc(rs.cases, func(c caseSpec) bool { return c.id == caseShared && c.shared }) {
		t.Errorf("no shared-Locker case among %v", rs.cases)
	}
	if len(rs.rtts) != cfg.rounds || rs.rtt() <= 0 {
		t.Errorf("round trips %v, median %v", rs.rtts, rs.rtt())
	}

	rep := newReport(rs, env, cfg)
	text := rep.text()
	for _, want := range []string{"uncontended, 1 worker", "32 workers, 1 ms hold", "sharing one Locker", "crash recovery", "semaphore of 4 permits", "read/write lock, 90% reads",
		"round trip (RTT): ", "× floor", "handoff p50 (RTTs)", "srv µs/acq", "cmd µs/acq", "issue 24", "verdict"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if err := rep.write(cfg.out); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(docPath(cfg.out))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.targets() {
		if !strings.Contains(string(doc), v.target) || v.status == statusNotMeasured {
			t.Errorf("target %q: %s", v.target, v.status)
		}
	}
	if info, err := os.Stat(chartPath(cfg.out)); err != nil || info.Size() < 1000 {
		t.Errorf("chart: %v", err)
	}
}

// TestParseCommandStats checks the commandstats parser, exclusions and all.
func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_setnx:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=3,usec=25,usec_per_call=8.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=4,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
	stats, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if stats["setnx"] != (commandStat{calls: 10, usec: 20}) || stats["evalsha"] != (commandStat{calls: 3, usec: 25}) ||
		stats.calls() != 13 || stats.usec() != 45 {
		t.Errorf("got %v, want setnx 10 calls in 20 µs and evalsha 3 in 25 only", stats)
	}
	stats.add(stats)
	if stats.calls() != 26 || stats.usec() != 90 {
		t.Errorf("doubled: %d calls, %d µs", stats.calls(), stats.usec())
	}
}

// TestParseServerCPU checks that the main thread's user and system time
// are summed.
func TestParseServerCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:9.5\r\nused_cpu_user:9.5\r\n" +
		"used_cpu_sys_main_thread:0.250000\r\nused_cpu_user_main_thread:1.500000\r\n"
	got, err := parseServerCPU(info)
	if err != nil || got != 1750*time.Millisecond {
		t.Errorf("got %v, %v; want 1.75s", got, err)
	}
	if _, err := parseServerCPU("# CPU\r\nused_cpu_sys:1\r\n"); err == nil {
		t.Error("no error without the main-thread fields")
	}
}

// TestMedian checks the median of odd and even counts.
func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

// TestFloorRate checks the round-trip floor of each kind of case.
func TestFloorRate(t *testing.T) {
	rtt := 100 * time.Microsecond
	for _, tc := range []struct {
		c    caseSpec
		want float64
	}{
		{caseSpec{workers: 1}, 5000},
		{caseSpec{workers: 8}, 10000},
		{caseSpec{workers: 8, hold: 900 * time.Microsecond}, 1000},
		{caseSpec{workers: 16, hold: 900 * time.Microsecond, permits: 4}, 4000},
		{caseSpec{workers: 2, crash: true}, 0},
	} {
		if got := floorRate(tc.c, rtt); math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("floorRate(%+v) = %v, want %v", tc.c, got, tc.want)
		}
	}
	if got := floorRate(caseSpec{workers: 1}, 0); got != 0 {
		t.Errorf("floor without an RTT = %v", got)
	}
}

// TestPercentile checks the nearest-rank percentiles.
func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if got := percentile(d, 50); got != 50 {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile(d, 99); got != 99 {
		t.Errorf("p99 = %v", got)
	}
	if got := percentile(d[:1], 99); got != 1 {
		t.Errorf("p99 of one = %v", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of none = %v", got)
	}
}
