package setnxlockotel_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/setnxlockotel"
)

// Metrics of two Lockers printed by the SDK's stdout exporter: a lock
// held for 2s and released, then a holder that crashes and whose lease is
// taken over once it has run out. (The exporter's own JSON works the same;
// this example prints one line per data point so its output is stable.)
func ExampleNewObserver() {
	server := miniredis.NewMiniRedis()
	if err := server.Start(); err != nil {
		panic(err)
	}
	defer server.Close()
	client := redis.NewClient(&redis.Options{Addr: server.Addr()})
	defer func() { _ = client.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	exporter, _ := stdoutmetric.New(stdoutmetric.WithEncoder(lines{}), stdoutmetric.WithoutTimestamps())
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exporter)))
	observer, err := setnxlockotel.NewObserver(setnxlockotel.WithMeterProvider(meters),
		setnxlockotel.WithKeyAttribute(func(key string) string { return strings.TrimPrefix(key, "lock.") }))
	if err != nil {
		panic(err)
	}
	clock := setnxlock.NewManualClock(time.Now())
	crashed, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithObserver(observer))
	survivor, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithObserver(observer))

	lock, _ := survivor.Acquire(ctx, "lock.report")
	clock.Advance(2 * time.Second)
	_ = lock.Release(ctx)

	_, _ = crashed.Acquire(ctx, "lock.report") // and never releases
	clock.Advance(time.Minute)
	lock, _ = survivor.TryAcquire(ctx, "lock.report")
	_ = lock.Release(ctx)

	// locks.held is 1: the crashed Locker (in this process, for the
	// example) never heard its lease end; Done would have reported it.
	_ = meters.Shutdown(ctx) // exports
	// Output:
	// setnxlock.acquire.duration (s) {setnxlock.key=report,setnxlock.outcome=acquired,setnxlock.wait=none}: count 3, sum 0
	// setnxlock.hold.duration (s) {setnxlock.end=released,setnxlock.key=report}: count 2, sum 2
	// setnxlock.locks.held ({lock}) {setnxlock.key=report}: 1
	// setnxlock.takeovers ({lock}) {setnxlock.key=report}: 1
}

// lines is a stdoutmetric Encoder that prints each data point on a line
// of its own, sorted.
type lines struct{}

func (lines) Encode(v any) error {
	rm, ok := v.(*metricdata.ResourceMetrics)
	if !ok {
		return fmt.Errorf("unexpected %T", v)
	}
	var out []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			prefix := fmt.Sprintf("%s (%s)", m.Name, m.Unit)
			switch data := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					out = append(out, fmt.Sprintf("%s {%s}: count %d, sum %g", prefix, attrs(dp.Attributes), dp.Count, dp.Sum))
				}
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					out = append(out, fmt.Sprintf("%s {%s}: %d", prefix, attrs(dp.Attributes), dp.Value))
				}
			}
		}
	}
	sort.Strings(out)
	fmt.Println(strings.Join(out, "\n"))
	return nil
}

func attrs(set attribute.Set) string {
	return set.Encoded(attribute.DefaultEncoder())
}
