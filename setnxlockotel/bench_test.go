package setnxlockotel

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// BenchmarkUncontendedCycle measures one TryAcquire+Release on a real
// redis-server without an observer and with this one, on the SDK's meter
// provider (a manual reader: measurements are aggregated, never exported)
// and tracer provider (every span sampled and recorded, none exported):
// the observer's own cost; and with metrics alone (a no-op tracer). `make
// bench` runs it.
func BenchmarkUncontendedCycle(b *testing.B) {
	server := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: server.Addr()})
	b.Cleanup(func() { _ = client.Close() })

	b.Run("observer-off", func(b *testing.B) { uncontendedCycles(b, client) })
	b.Run("observer-on", func(b *testing.B) {
		meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		traces := sdktrace.NewTracerProvider()
		b.Cleanup(func() {
			_ = meters.Shutdown(context.Background())
			_ = traces.Shutdown(context.Background())
		})
		observer, err := NewObserver(WithMeterProvider(meters), WithTracerProvider(traces))
		if err != nil {
			b.Fatal(err)
		}
		uncontendedCycles(b, client, setnxlock.WithObserver(observer))
	})
	b.Run("observer-on-metrics-only", func(b *testing.B) {
		meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = meters.Shutdown(context.Background()) })
		observer, err := NewObserver(WithMeterProvider(meters), WithTracerProvider(noop.NewTracerProvider()))
		if err != nil {
			b.Fatal(err)
		}
		uncontendedCycles(b, client, setnxlock.WithObserver(observer))
	})
}

func uncontendedCycles(b *testing.B, client *redis.Client, opts ...setnxlock.Option) {
	ctx := context.Background()
	locker, err := setnxlock.New(client, opts...)
	if err != nil {
		b.Fatal(err)
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
