package setnxlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// BenchmarkWhereACycleGoes splits a cycle's wall time between the round
// trips go-redis makes for it and what the library adds around them, on a
// real redis-server (issue 24: measure where every microsecond goes).
// Each metric is a mean per cycle:
//
//   - acquire-µs, release-µs: TryAcquire's (or Acquire's) and Release's
//     calls, as their caller sees them;
//   - acquire-trips-µs, release-trips-µs: the round trips those calls made,
//     each timed by a go-redis hook around the command alone;
//   - claim-in-flight-% (contended only): the share of Releases called,
//     at the end of the hold, while the claim of a handoff heard (heard.go)
//     still held the Lock's turn; release-trips-µs counts the claim's
//     round trip and the Release's.
//
// The difference between a call and its round trips is the library's own
// time: on the uncontended Release, mostly the goroutine that bounds its
// round trip by the lease's end (turn.go, H11).
func BenchmarkWhereACycleGoes(b *testing.B) {
	server := redistest.Start(b)
	b.Run("uncontended", func(b *testing.B) {
		client, timing := timedClient(b, server.Addr())
		locker, err := New(client)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		var acquire, release time.Duration
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			timing.phase.Store(phaseAcquire)
			lock, err := locker.TryAcquire(ctx, "bench.breakdown")
			if err != nil {
				b.Fatal(err)
			}
			acquired := time.Now()
			timing.phase.Store(phaseRelease)
			if err := lock.Release(ctx); err != nil {
				b.Fatal(err)
			}
			acquire += acquired.Sub(start)
			release += time.Since(acquired)
		}
		report(b, "acquire-µs", acquire)
		report(b, "release-µs", release)
		report(b, "acquire-trips-µs", timing.total(phaseAcquire))
		report(b, "release-trips-µs", timing.total(phaseRelease))
	})
	// Eight Lockers, each on its own client, take one key in turn, hold
	// it, and release it: every cycle is a handoff, held on arrival.
	for _, hold := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("8-lockers-%s-hold", hold), func(b *testing.B) { contendedCycles(b, server.Addr(), hold) })
	}
}

// contendedCycles is BenchmarkWhereACycleGoes's contended case: eight
// Lockers on one key, each cycle held for hold.
func contendedCycles(b *testing.B, addr string, hold time.Duration) {
	const workers = 8
	ctx := await.Context(b) // an Acquire that never returns fails the run instead of hanging it
	var lockers [workers]*Locker
	var timings [workers]*commandTiming
	for i := range lockers {
		client, timing := timedClient(b, addr)
		locker, err := New(client, WithBackoff(time.Millisecond, time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		lockers[i], timings[i] = locker, timing
	}
	var cycles atomic.Int64
	var mu sync.Mutex
	var acquire, release time.Duration
	var inFlight int
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range lockers {
		wg.Go(func() {
			for cycles.Add(1) <= int64(b.N) {
				start := time.Now()
				timings[i].phase.Store(phaseAcquire)
				lock, err := lockers[i].Acquire(ctx, "bench.breakdown.contended")
				if err != nil {
					b.Error(err)
					return
				}
				acquired := time.Now()
				timings[i].phase.Store(phaseRelease) // the claim's round trip counts here, and the Release's
				if hold > 0 {
					time.Sleep(hold)
				}
				claiming := false
				select {
				case lock.op <- struct{}{}: // the turn is free: taken and given back at once
					lock.unlockOp()
				default:
					claiming = true
				}
				held := time.Now()
				if err := lock.Release(ctx); err != nil {
					b.Error(err)
					return
				}
				released := time.Now()
				mu.Lock()
				acquire += acquired.Sub(start)
				release += released.Sub(held)
				if claiming {
					inFlight++
				}
				mu.Unlock()
			}
		})
	}
	await.Group(b, &wg, "the workers' %d cycles", b.N)
	var acquireTrips, releaseTrips time.Duration
	for _, timing := range timings {
		acquireTrips += timing.total(phaseAcquire)
		releaseTrips += timing.total(phaseRelease)
	}
	report(b, "acquire-µs", acquire)
	report(b, "release-µs", release)
	b.ReportMetric(100*float64(inFlight)/float64(b.N), "claim-in-flight-%")
	report(b, "acquire-trips-µs", acquireTrips)
	report(b, "release-trips-µs", releaseTrips)
}

// BenchmarkReleaseScriptServerTime reports the server's own time per call
// of release.lua (srv-µs/call, from INFO commandstats: the script and the
// commands it runs, no parsing or I/O) for an uncontended release, beside
// the same for a bare compare-and-delete script, the least a scripted
// release can cost (the shape of bsm/redislock's). Its ns/op is the whole
// cycle's and is not the point.
func BenchmarkReleaseScriptServerTime(b *testing.B) {
	server := redistest.Start(b)
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: server.Addr()})
	b.Cleanup(func() { _ = client.Close() })
	b.Run("release.lua", func(b *testing.B) {
		resetStats(b, client) // New sends nothing: the counts are the cycles'
		uncontendedCycles(b, client, false)
		b.ReportMetric(evalshaMicros(b, client), "srv-µs/call")
	})
	b.Run("compare-and-delete", func(b *testing.B) {
		script := redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)
		resetStats(b, client)
		for b.Loop() {
			if err := client.Set(ctx, "bench.script", "v", 0).Err(); err != nil {
				b.Fatal(err)
			}
			if err := script.Run(ctx, client, []string{"bench.script"}, "v").Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(evalshaMicros(b, client), "srv-µs/call")
	})
}

func resetStats(b *testing.B, client *redis.Client) {
	if err := client.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

// evalshaMicros is the server's time per EVALSHA since the last reset.
func evalshaMicros(b *testing.B, client *redis.Client) float64 {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for field := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
					f, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return f
				}
			}
		}
	}
	b.Fatal("no EVALSHA in INFO commandstats")
	return 0
}

// report reports total as a mean in µs per cycle.
func report(b *testing.B, name string, total time.Duration) {
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), name)
}

const (
	phaseAcquire int32 = iota
	phaseRelease
)

// commandTiming is a go-redis hook that adds up the time of every command
// and pipeline a client sends, by the caller's phase at the time.
type commandTiming struct {
	phase  atomic.Int32
	totals [2]atomic.Int64 // ns, by phase
}

// timedClient is a client of addr with a commandTiming hook.
func timedClient(b *testing.B, addr string) (*redis.Client, *commandTiming) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = client.Close() })
	timing := &commandTiming{}
	client.AddHook(timing)
	return client, timing
}

func (c *commandTiming) total(phase int32) time.Duration {
	return time.Duration(c.totals[phase].Load())
}

func (c *commandTiming) add(start time.Time) {
	c.totals[c.phase.Load()].Add(int64(time.Since(start)))
}

func (c *commandTiming) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandTiming) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		defer c.add(time.Now())
		return next(ctx, cmd)
	}
}

func (c *commandTiming) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer c.add(time.Now())
		return next(ctx, cmds)
	}
}
