package main

import (
	"bufio"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// What a run counts outside its workers: the server's INFO commandstats and
// main-thread CPU time, reset before and read after each run, and the
// process's heap allocations.

// excludedCommands are not the contenders' work: the benchmark's own
// CONFIG RESETSTAT and INFO, and go-redis's connection handshake (HELLO,
// CLIENT SETINFO), which a pool sends once per new connection.
var excludedCommands = map[string]bool{
	"info": true, "config|resetstat": true, "config|get": true, "config|set": true,
	"hello": true, "client|setinfo": true,
}

// commandStat is one command's line of INFO commandstats: how often it
// ran and the server's microseconds spent running it.
type commandStat struct{ calls, usec int64 }

// commandStats is INFO commandstats by command name.
type commandStats map[string]commandStat

// parseCommandStats reads INFO commandstats, leaving out excludedCommands.
// Redis counts the commands that scripts run as well as the EVAL/EVALSHA
// that ran them, in calls and in usec alike: a script's usec already
// includes its inner commands' usec.
func parseCommandStats(info string) (commandStats, error) {
	stats := commandStats{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("commandstats: malformed line %q", line)
		}
		if excludedCommands[name] {
			continue
		}
		st := stats[name]
		for field := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(field, "=")
			var into *int64
			switch k {
			case "calls":
				into = &st.calls
			case "usec":
				into = &st.usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("commandstats: %q: %w", line, err)
			}
			*into += n
		}
		stats[name] = st
	}
	return stats, sc.Err()
}

// add folds other into s.
func (s commandStats) add(other commandStats) {
	for name, st := range other {
		sum := s[name]
		sum.calls += st.calls
		sum.usec += st.usec
		s[name] = sum
	}
}

// calls is the sum of calls over all commands.
func (s commandStats) calls() int64 {
	var n int64
	for _, st := range s {
		n += st.calls
	}
	return n
}

// usec is the sum of usec over all commands, the commands scripts ran
// counted in their script's usec and again in their own.
func (s commandStats) usec() int64 {
	var n int64
	for _, st := range s {
		n += st.usec
	}
	return n
}

// infoField returns the value of the field name in an INFO reply.
func infoField(info, name string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

// parseServerCPU reads the CPU time of the server's main thread, user and
// system, from INFO cpu: the thread that parses, runs and answers every
// command when I/O threads are off, as they are by default.
func parseServerCPU(info string) (time.Duration, error) {
	var sum time.Duration
	for _, name := range []string{"used_cpu_user_main_thread", "used_cpu_sys_main_thread"} {
		v, ok := infoField(info, name)
		if !ok {
			return 0, fmt.Errorf("INFO cpu: no %s", name)
		}
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s: %w", name, err)
		}
		sum += time.Duration(secs * float64(time.Second))
	}
	return sum, nil
}

// resetStats zeroes the server's commandstats before a Redis run and
// returns its main-thread CPU time so far.
func (h *harness) resetStats(lib *library) (time.Duration, error) {
	if !lib.redis {
		return 0, nil
	}
	if err := h.admin.ConfigResetStat(context.Background()).Err(); err != nil {
		return 0, fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	info, err := h.admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	return parseServerCPU(info)
}

// serverStats reads the commandstats since the last reset and the server's
// main-thread CPU time since cpuBefore.
func (h *harness) serverStats(lib *library, cpuBefore time.Duration) (commandStats, time.Duration, error) {
	if !lib.redis {
		return nil, 0, nil
	}
	info, err := h.admin.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		return nil, 0, fmt.Errorf("INFO commandstats cpu: %w", err)
	}
	stats, err := parseCommandStats(info)
	if err != nil {
		return nil, 0, err
	}
	cpu, err := parseServerCPU(info)
	return stats, cpu - cpuBefore, err
}

// mallocs is the process's cumulative count of heap allocations.
func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}
