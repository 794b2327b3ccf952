package setnxlockotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/setnxlock/setnxlock"
)

// Option configures NewObserver.
type Option func(*config)

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	keyAttr func(key string) string
	clock   *setnxlock.ServerClock
}

func newConfig(opts []Option) config {
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	if c.meters == nil {
		c.meters = otel.GetMeterProvider()
	}
	if c.tracers == nil {
		c.tracers = otel.GetTracerProvider()
	}
	return c
}

// WithMeterProvider makes the observer record its instruments with mp;
// nil, or no such option, is the global MeterProvider (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meters = mp }
}

// WithTracerProvider makes the observer start its spans with tp; nil, or no
// such option, is the global TracerProvider (otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracers = tp }
}

// WithKeyAttribute maps each lock key to the value of the setnxlock.key
// attribute on every instrument and span, such as the key's prefix
// ("lock.report.2024-05-01" to "report"). Keys are often unbounded (a key
// per user, per job run), and every distinct value is a time series of its
// own, so the mapping must have few values; "" leaves the attribute out.
// Without this option no key attribute is recorded.
func WithKeyAttribute(mapping func(key string) string) Option {
	return func(c *config) { c.keyAttr = mapping }
}

// WithServerClock reports clock's Offset, how far the Redis server's clock
// is ahead of this process's, as the setnxlock.clock.offset gauge: across a
// fleet, its spread is the clock skew that the locks' safety assumes is
// below the skew margin (WithSkewMargin). A nil clock records no gauge.
func WithServerClock(clock *setnxlock.ServerClock) Option {
	return func(c *config) { c.clock = clock }
}
