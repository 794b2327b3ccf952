package setnxlockotel

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent())
}

// telemetry is an SDK set up for a test: a manual reader and an in-memory
// span exporter.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	meters *sdkmetric.MeterProvider
	traces *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T) *telemetry {
	tm := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	tm.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	tm.traces = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tm.spans))
	t.Cleanup(func() {
		_ = tm.meters.Shutdown(context.Background())
		_ = tm.traces.Shutdown(context.Background())
	})
	return tm
}

// collected returns the metric named name, if it has been recorded.
func (tm *telemetry) collected(name string) (metricdata.Metrics, bool) {
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		return metricdata.Metrics{}, false
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// collect returns the metric named name, or fails.
func (tm *telemetry) collect(t *testing.T, name string) metricdata.Metrics {
	t.Helper()
	m, ok := tm.collected(name)
	require.True(t, ok, "no metric %s collected", name)
	return m
}

// sum is the total of an integer sum instrument over its attribute sets;
// 0 before anything was recorded. It never fails the test, so that it may
// run in require.Eventually's goroutine.
func (tm *telemetry) sum(name string) int64 {
	m, ok := tm.collected(name)
	if !ok {
		return 0
	}
	var total int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		total += dp.Value
	}
	return total
}

// awaitSum waits, at most 5s, until the sum instrument name totals want.
func (tm *telemetry) awaitSum(t *testing.T, name string, want int64) {
	t.Helper()
	require.Eventually(t, func() bool { return tm.sum(name) == want }, 5*time.Second, time.Millisecond,
		"%s to reach %d", name, want)
}

// histogram returns the data points of a float histogram with attribute
// kv, if given.
func (tm *telemetry) histogram(t *testing.T, name string, kvs ...attribute.KeyValue) []metricdata.HistogramDataPoint[float64] {
	t.Helper()
	var points []metricdata.HistogramDataPoint[float64]
	for _, dp := range tm.collect(t, name).Data.(metricdata.Histogram[float64]).DataPoints {
		matches := true
		for _, kv := range kvs {
			if v, ok := dp.Attributes.Value(kv.Key); !ok || v != kv.Value {
				matches = false
			}
		}
		if matches {
			points = append(points, dp)
		}
	}
	return points
}

// fleet is Lockers on one real redis-server, each on a client of its own
// like a process of its own, reporting to one observer.
type fleet struct {
	addr     string
	observer setnxlock.Observer
	raw      *redis.Client
}

func (f *fleet) locker(t *testing.T, opts ...setnxlock.Option) *setnxlock.Locker {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: f.addr})
	t.Cleanup(func() { _ = client.Close() })
	if f.observer != nil {
		opts = append([]setnxlock.Option{setnxlock.WithObserver(f.observer)}, opts...)
	}
	l, err := setnxlock.New(client, append([]setnxlock.Option{setnxlock.WithBackoff(time.Millisecond, 20*time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// The done-when test of issue 25: real Lockers on a real redis-server,
// every instrument checked by value.
func TestEveryInstrumentOnRealLockers(t *testing.T) {
	ctx := await.Context(t) // a deadline on every wait
	server := redistest.Start(t)
	tm := newTelemetry(t)
	raw := redis.NewClient(&redis.Options{Addr: server.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	clock, err := setnxlock.NewServerClock(ctx, raw, time.Hour)
	require.NoError(t, err)
	t.Cleanup(func() { _ = clock.Close() })
	observer, err := NewObserver(WithMeterProvider(tm.meters), WithTracerProvider(tm.traces), WithServerClock(clock),
		WithKeyAttribute(func(key string) string { return strings.Split(key, ".")[1] }))
	require.NoError(t, err)
	f := &fleet{addr: server.Addr(), observer: observer, raw: raw}
	crashed := &fleet{addr: server.Addr()} // a process that dies holding a lock reports nothing

	// A contended Acquire: its sample is at least the hold it waited for.
	holder, err := f.locker(t).Acquire(ctx, "lock.orders")
	require.NoError(t, err)
	parentCtx, parent := tm.traces.Tracer("test").Start(ctx, "request")
	waited := make(chan *setnxlock.Lock, 1)
	go func() {
		lock, err := f.locker(t).Acquire(parentCtx, "lock.orders")
		assert.NoError(t, err)
		waited <- lock
	}()
	tm.awaitSum(t, "setnxlock.acquire.waiting", 1)
	waitingSince := time.Now()
	time.Sleep(200 * time.Millisecond) // the hold the waiter waits for
	hold := time.Since(waitingSince)
	require.NoError(t, holder.Release(ctx))
	served := await.Recv(t, waited, "the waiter's Acquire")
	parent.End()
	tm.awaitSum(t, "setnxlock.acquire.waiting", 0)
	assert.Equal(t, int64(1), tm.sum("setnxlock.locks.held"), "the waiter holds the lock")

	acquired := tm.histogram(t, "setnxlock.acquire.duration", AttrOutcome.String("acquired"), AttrKey.String("orders"))
	var waitedFor []float64
	var uncontended uint64
	for _, dp := range acquired {
		wait, _ := dp.Attributes.Value(AttrWait)
		if wait.AsString() == "none" {
			uncontended += dp.Count
			continue
		}
		assert.Contains(t, []string{"handoff", "barging", "wakeup", "poll"}, wait.AsString())
		require.Equal(t, uint64(1), dp.Count)
		waitedFor = append(waitedFor, dp.Sum)
	}
	assert.Equal(t, uint64(1), uncontended, "the holder's Acquire did not wait")
	require.Len(t, waitedFor, 1, "one contended Acquire")
	assert.GreaterOrEqual(t, waitedFor[0], hold.Seconds(), "the contended Acquire's sample covers the hold it waited for")
	released := tm.histogram(t, "setnxlock.hold.duration", AttrEnd.String("released"))
	require.Len(t, released, 1)
	assert.Equal(t, uint64(1), released[0].Count)
	assert.GreaterOrEqual(t, released[0].Sum, hold.Seconds(), "the holder held at least as long as the waiter waited")

	require.NoError(t, served.Release(ctx))
	assert.Equal(t, int64(0), tm.sum("setnxlock.locks.held"), "held is back to 0 after the release")

	// The spans: each in its caller's context, the waiter's in the request.
	var acquireSpans, releaseSpans int
	for _, span := range tm.spans.GetSpans() {
		switch span.Name {
		case "setnxlock.acquire":
			acquireSpans++
			attrs := attribute.NewSet(span.Attributes...)
			outcome, _ := attrs.Value(AttrOutcome)
			assert.Equal(t, "acquired", outcome.AsString())
			key, _ := attrs.Value(AttrKey)
			assert.Equal(t, "orders", key.AsString())
			attempts, _ := attrs.Value(AttrAttempts)
			wait, _ := attrs.Value(AttrWait)
			if span.Parent.SpanID() == parent.SpanContext().SpanID() {
				assert.NotEqual(t, "none", wait.AsString(), "the request's Acquire waited")
				assert.GreaterOrEqual(t, attempts.AsInt64(), int64(2))
				assert.GreaterOrEqual(t, span.EndTime.Sub(span.StartTime), hold)
			} else {
				assert.False(t, span.Parent.IsValid(), "the holder's Acquire has no parent")
				assert.Equal(t, int64(1), attempts.AsInt64())
			}
		case "setnxlock.release":
			releaseSpans++
			attrs := attribute.NewSet(span.Attributes...)
			end, _ := attrs.Value(AttrEnd)
			assert.Equal(t, "released", end.AsString())
		}
	}
	assert.Equal(t, 2, acquireSpans)
	assert.Equal(t, 2, releaseSpans)
	inRequest := 0
	for _, span := range tm.spans.GetSpans() {
		if span.Parent.SpanID() == parent.SpanContext().SpanID() {
			inRequest++
		}
	}
	assert.Equal(t, 1, inRequest, "the waiter's Acquire is a child of the request's span")

	// A crash: the holder dies; the next Acquire takes its lease over once
	// it has run out.
	_, err = crashed.locker(t, setnxlock.WithTTL(300*time.Millisecond)).TryAcquire(ctx, "lock.crash")
	require.NoError(t, err)
	recovered, err := f.locker(t).Acquire(ctx, "lock.crash")
	require.NoError(t, err)
	assert.Equal(t, int64(1), tm.sum("setnxlock.takeovers"))
	takeover := tm.histogram(t, "setnxlock.acquire.duration", AttrWait.String("takeover"), AttrKey.String("crash"))
	require.Len(t, takeover, 1)
	assert.Equal(t, uint64(1), takeover[0].Count)
	require.NoError(t, recovered.Release(ctx))

	// A loss: the key is overwritten under the holder, whose Refresh fails.
	lost, err := f.locker(t).TryAcquire(ctx, "lock.loss")
	require.NoError(t, err)
	require.NoError(t, raw.Set(ctx, "lock.loss", time.Now().Add(time.Hour).UnixMilli(), 0).Err())
	require.ErrorIs(t, lost.Refresh(ctx, time.Minute), setnxlock.ErrNotHeld)
	assert.Equal(t, int64(1), tm.sum("setnxlock.locks.lost"))
	assert.Equal(t, int64(1), tm.sum("setnxlock.refresh.failures"))
	lostHold := tm.histogram(t, "setnxlock.hold.duration", AttrEnd.String("lost"), AttrKey.String("loss"))
	require.Len(t, lostHold, 1)
	assert.Equal(t, uint64(1), lostHold[0].Count)

	// A timeout: a held key, an Acquire that gives up.
	_, err = crashed.locker(t).TryAcquire(ctx, "lock.busy")
	require.NoError(t, err)
	waiter := f.locker(t)
	giveUp, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	deadline, _ := giveUp.Deadline()
	called := time.Now()
	_, err = waiter.Acquire(giveUp, "lock.busy")
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	timedOut := tm.histogram(t, "setnxlock.acquire.duration", AttrOutcome.String("timeout"), AttrKey.String("busy"))
	require.Len(t, timedOut, 1)
	assert.Equal(t, uint64(1), timedOut[0].Count)
	assert.GreaterOrEqual(t, timedOut[0].Sum, deadline.Sub(called).Seconds(), "it waited until its context ended")

	// Everything settled: nothing held, nobody waiting.
	assert.Equal(t, int64(0), tm.sum("setnxlock.locks.held"))
	assert.Equal(t, int64(0), tm.sum("setnxlock.acquire.waiting"))

	// The clock's offset, as the ServerClock measured it.
	offset := tm.collect(t, "setnxlock.clock.offset")
	assert.Equal(t, "s", offset.Unit)
	points := offset.Data.(metricdata.Gauge[float64]).DataPoints
	require.Len(t, points, 1)
	assert.Equal(t, clock.Offset().Seconds(), points[0].Value)
}

// The instruments' names and units, as OpenTelemetry's conventions ask.
func TestInstrumentsAreNamedAndUnited(t *testing.T) {
	tm := newTelemetry(t)
	observer, err := NewObserver(WithMeterProvider(tm.meters), WithTracerProvider(tm.traces))
	require.NoError(t, err)
	// One event each, so every synchronous instrument is exported.
	for _, e := range []setnxlock.Event{
		{Kind: setnxlock.EventWaiting, Key: "k"},
		{Kind: setnxlock.EventRecovered, Key: "k", Outcome: setnxlock.OutcomeAcquired, Wait: setnxlock.WaitTakeover, Waited: time.Second},
		{Kind: setnxlock.EventLost, Key: "k", Held: 2 * time.Second},
		{Kind: setnxlock.EventRefreshFailed, Key: "k"},
	} {
		observer.Observe(e)
	}
	units := map[string]string{}
	var rm metricdata.ResourceMetrics
	require.NoError(t, tm.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
		}
	}
	assert.Equal(t, map[string]string{
		"setnxlock.acquire.duration": "s",
		"setnxlock.hold.duration":    "s",
		"setnxlock.locks.held":       "{lock}",
		"setnxlock.acquire.waiting":  "{call}",
		"setnxlock.locks.lost":       "{lock}",
		"setnxlock.takeovers":        "{lock}",
		"setnxlock.refresh.failures": "{refresh}",
	}, units)
	assert.Equal(t, int64(0), tm.sum("setnxlock.acquire.waiting"), "the takeover ended the wait")
	assert.Equal(t, int64(0), tm.sum("setnxlock.locks.held"), "won, then lost")
	hold := tm.histogram(t, "setnxlock.hold.duration")
	require.Len(t, hold, 1)
	assert.Equal(t, 2.0, hold[0].Sum)
	_, keyed := hold[0].Attributes.Value(AttrKey)
	assert.False(t, keyed, "no key attribute without WithKeyAttribute")
}

// A nil provider is the global one.
func TestNilProvidersAreTheGlobalOnes(t *testing.T) {
	observer, err := NewObserver(WithMeterProvider(nil), WithTracerProvider(nil))
	require.NoError(t, err)
	observer.Observe(setnxlock.Event{Kind: setnxlock.EventAcquired, Key: "k", Outcome: setnxlock.OutcomeAcquired})
}
