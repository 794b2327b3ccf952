package setnxlockotel

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	otelprometheus "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// The names the README's PromQL queries use are those the Prometheus
// exporter gives the instruments.
func TestTheReadmesQueriesUseThePrometheusExportersNames(t *testing.T) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprometheus.New(otelprometheus.WithRegisterer(registry), otelprometheus.WithoutScopeInfo(), otelprometheus.WithoutTargetInfo())
	require.NoError(t, err)
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { _ = meters.Shutdown(context.Background()) })
	server := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: server.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	clock, err := setnxlock.NewServerClock(context.Background(), client, time.Hour)
	require.NoError(t, err)
	t.Cleanup(func() { _ = clock.Close() })
	observer, err := NewObserver(WithMeterProvider(meters), WithTracerProvider(noop.NewTracerProvider()), WithServerClock(clock))
	require.NoError(t, err)
	for _, e := range []setnxlock.Event{
		{Kind: setnxlock.EventWaiting, Key: "k"},
		{Kind: setnxlock.EventRecovered, Key: "k", Outcome: setnxlock.OutcomeAcquired, Wait: setnxlock.WaitTakeover},
		{Kind: setnxlock.EventLost, Key: "k"},
		{Kind: setnxlock.EventRefreshFailed, Key: "k"},
	} {
		observer.Observe(e)
	}

	families, err := registry.Gather()
	require.NoError(t, err)
	names := map[string][]string{}
	for _, f := range families {
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		sort.Strings(labels)
		names[f.GetName()] = labels
	}
	assert.Equal(t, map[string][]string{
		"setnxlock_acquire_duration_seconds": {"setnxlock_outcome", "setnxlock_wait"},
		"setnxlock_hold_duration_seconds":    {"setnxlock_end"},
		"setnxlock_locks_held":               nil,
		"setnxlock_acquire_waiting":          nil,
		"setnxlock_locks_lost_total":         nil,
		"setnxlock_takeovers_total":          nil,
		"setnxlock_refresh_failures_total":   nil,
		"setnxlock_clock_offset_seconds":     nil,
	}, names)
}
