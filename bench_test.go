package setnxlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock/internal/redistest"
)

// BenchmarkUncontendedCycle measures one acquire+release on a real
// redis-server against the floor: a bare SETNX+DEL loop on the same server
// in the same run. `make bench` prints the ratio.
func BenchmarkUncontendedCycle(b *testing.B) {
	server := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: server.Addr()})
	b.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()

	b.Run("raw-SETNX+DEL", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cmd := redis.NewIntCmd(ctx, "setnx", "bench.raw", "1")
			if err := client.Process(ctx, cmd); err != nil || cmd.Val() != 1 {
				b.Fatal(err, cmd.Val())
			}
			if err := client.Del(ctx, "bench.raw").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("setnxlock", func(b *testing.B) { uncontendedCycles(b, client, false) })
	// The acquire script instead of SET NX PX GET: go-redis answers that
	// command's nil (a win) as the error redis.Nil, and with retries on
	// (MaxRetries > 0) checks every nil against its retryable errors.
	b.Run("setnxlock-acquire-script", func(b *testing.B) { uncontendedCycles(b, client, true) })
}

// uncontendedCycles acquires and releases one key, alone.
func uncontendedCycles(b *testing.B, client *redis.Client, acquireScript bool) {
	ctx := context.Background()
	locker, err := New(client)
	if err != nil {
		b.Fatal(err)
	}
	if acquireScript {
		locker.caps.disable(capSetGet)
	}
	b.ReportAllocs()
	for b.Loop() {
		lock, err := locker.TryAcquire(ctx, "bench.lock")
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseExpiry(b *testing.B) {
	value := formatValue(time.Now(), newToken(), DefaultIdentity())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseExpiry(value); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFormatValue(b *testing.B) {
	token := newToken()
	b.ReportAllocs()
	for b.Loop() {
		_ = formatValue(time.Now(), token, DefaultIdentity())
	}
}

func BenchmarkNewToken(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = newToken()
	}
}
