package main

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every case for every library with tiny durations and
// checks that each produced numbers and that both files were written. It
// is skipped without redis-server, except under CI=true, where that fails.
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
			case (c.crash || c.workers > 1) && lib.redis && len(res.handoffs) == 0:
				t.Errorf("%s, %s: no handoffs recorded", c.id, lib.name)
			}
			if res.firstErr != nil {
				t.Logf("%s, %s: %d errors, first: %v", c.id, lib.name, res.errors, res.firstErr)
			}
		}
	}

	rep := newReport(rs, env, cfg)
	text := rep.text()
	for _, want := range []string{"uncontended, 1 worker", "32 workers, 1 ms hold", "crash recovery", "verdict"} {
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
		"cmdstat_evalsha:calls=3,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=4,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
	calls, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if calls["setnx"] != 10 || calls["evalsha"] != 3 || total(calls) != 13 {
		t.Errorf("got %v, want setnx 10 and evalsha 3 only", calls)
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
