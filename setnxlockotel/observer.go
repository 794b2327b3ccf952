// Package setnxlockotel records a setnxlock Locker's events as
// OpenTelemetry metrics and traces:
//
//	observer, err := setnxlockotel.NewObserver(setnxlockotel.WithMeterProvider(mp))
//	locker, err := setnxlock.New(client, setnxlock.WithObserver(observer))
//
// Instruments (units as OpenTelemetry's conventions ask):
//
//	setnxlock.acquire.duration  histogram, s       Acquire and TryAcquire, by setnxlock.outcome and setnxlock.wait
//	setnxlock.hold.duration     histogram, s       from the win to the release or the loss, by setnxlock.end
//	setnxlock.locks.held        up-down counter    locks held now
//	setnxlock.acquire.waiting   up-down counter    Acquire calls waiting now
//	setnxlock.locks.lost        counter            leases lost (setnxlock.EventLost)
//	setnxlock.takeovers         counter            crashed holders' leases recovered
//	setnxlock.refresh.failures  counter            Refresh calls and renewals that failed
//	setnxlock.clock.offset      gauge, s           a ServerClock's offset (WithServerClock)
//
// Every Acquire, TryAcquire and Release is a span (setnxlock.acquire,
// setnxlock.try_acquire, setnxlock.release) in the caller's context, so a
// lock wait shows up inside the trace of the request that caused it, and
// the Redis commands of the call, if go-redis is traced too, inside it.
// The observer hears the calls through setnxlock.CallObserver, which it
// implements.
//
// A lock counts in setnxlock.locks.held from its win to its end as its
// Locker hears it: Release, or a loss. A Lock that is never released and
// never watched (Done, Context, WithAutoRefresh) ends unheard when its
// lease runs out, and stays counted; a Release called after that reports
// the loss, and ends it.
package setnxlockotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/setnxlock/setnxlock"
)

// ScopeName is the instrumentation scope of the observer's meter and
// tracer.
const ScopeName = "github.com/setnxlock/setnxlock/setnxlockotel"

// The attributes the observer records.
const (
	AttrOutcome  = attribute.Key("setnxlock.outcome")  // acquired, timeout, canceled, error; a TryAcquire refused: refused
	AttrWait     = attribute.Key("setnxlock.wait")     // none, handoff, barging, wakeup, poll, takeover
	AttrEnd      = attribute.Key("setnxlock.end")      // released, lost
	AttrKey      = attribute.Key("setnxlock.key")      // WithKeyAttribute's value
	AttrAttempts = attribute.Key("setnxlock.attempts") // spans: the attempts of an Acquire
	AttrPath     = attribute.Key("setnxlock.path")     // spans: scripts, commands, classic
)

// durationBuckets are the histograms' bucket bounds, in seconds: from an
// uncontended round trip to a long wait.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// observer turns events into measurements, and calls into spans.
type observer struct {
	keyAttr func(string) string
	tracer  trace.Tracer

	acquireDuration metric.Float64Histogram
	holdDuration    metric.Float64Histogram
	held            metric.Int64UpDownCounter
	waiting         metric.Int64UpDownCounter
	lost            metric.Int64Counter
	takeovers       metric.Int64Counter
	refreshFailures metric.Int64Counter
}

// NewObserver returns a setnxlock.Observer that records the instruments
// listed in the package comment, and a span per Acquire, TryAcquire and
// Release; give it to setnxlock.WithObserver. It fails only when the
// MeterProvider refuses an instrument.
func NewObserver(opts ...Option) (setnxlock.Observer, error) {
	c := newConfig(opts)
	meter := c.meters.Meter(ScopeName)
	o := &observer{keyAttr: c.keyAttr, tracer: c.tracers.Tracer(ScopeName)}
	var errs []error
	record := func(err error) { errs = append(errs, err) }
	var err error
	o.acquireDuration, err = meter.Float64Histogram("setnxlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("How long Acquire and TryAcquire calls took, to the lock or to giving up."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	record(err)
	o.holdDuration, err = meter.Float64Histogram("setnxlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long locks were held, to their release or their loss."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	record(err)
	o.held, err = meter.Int64UpDownCounter("setnxlock.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held now."))
	record(err)
	o.waiting, err = meter.Int64UpDownCounter("setnxlock.acquire.waiting", metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls waiting for a lock now."))
	record(err)
	o.lost, err = meter.Int64Counter("setnxlock.locks.lost", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks lost before their release: refused, overwritten or run out."))
	record(err)
	o.takeovers, err = meter.Int64Counter("setnxlock.takeovers", metric.WithUnit("{lock}"),
		metric.WithDescription("Leases of crashed or stalled holders taken over after they ran out."))
	record(err)
	o.refreshFailures, err = meter.Int64Counter("setnxlock.refresh.failures", metric.WithUnit("{refresh}"),
		metric.WithDescription("Refresh calls and automatic renewals that failed."))
	record(err)
	if c.clock != nil {
		_, err = meter.Float64ObservableGauge("setnxlock.clock.offset", metric.WithUnit("s"),
			metric.WithDescription("How far the Redis server's clock is ahead of this process's, at the ServerClock's last measurement."),
			metric.WithFloat64Callback(func(_ context.Context, g metric.Float64Observer) error {
				g.Observe(c.clock.Offset().Seconds())
				return nil
			}))
		record(err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("setnxlockotel: %w", err)
	}
	return o, nil
}

// Observe records e.
func (o *observer) Observe(e setnxlock.Event) {
	ctx := context.Background()
	key := o.keyOption(e.Key)
	switch e.Kind {
	case setnxlock.EventWaiting:
		o.waiting.Add(ctx, 1, key...)
	case setnxlock.EventAcquired, setnxlock.EventRecovered, setnxlock.EventAcquireFailed:
		if e.Wait != setnxlock.WaitNone { // its EventWaiting counted it
			o.waiting.Add(ctx, -1, key...)
		}
		o.acquireDuration.Record(ctx, e.Waited.Seconds(), o.acquireAttributes(e)...)
		if e.Kind == setnxlock.EventAcquireFailed {
			return
		}
		o.held.Add(ctx, 1, key...)
		if e.Kind == setnxlock.EventRecovered {
			o.takeovers.Add(ctx, 1, key...)
		}
	case setnxlock.EventReleased, setnxlock.EventLost:
		o.held.Add(ctx, -1, key...)
		end := endReleased
		if e.Kind == setnxlock.EventLost {
			end = endLost
			o.lost.Add(ctx, 1, key...)
		}
		o.holdDuration.Record(ctx, e.Held.Seconds(), o.endAttributes(e.Key, end)...)
	case setnxlock.EventRefreshFailed:
		o.refreshFailures.Add(ctx, 1, key...)
	}
}

// The ends of a hold (AttrEnd).
const (
	endReleased = iota
	endLost
)

var endNames = [...]string{endReleased: "released", endLost: "lost"}

// The attribute sets without a key attribute, made once: a measurement
// then allocates no set of its own.
var (
	acquireSets = func() (sets [outcomes][waits][]metric.RecordOption) {
		for outcome := range outcomes {
			for wait := range waits {
				sets[outcome][wait] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
					AttrOutcome.String(setnxlock.Outcome(outcome).String()), AttrWait.String(setnxlock.WaitKind(wait).String())))}
			}
		}
		return sets
	}()
	endSets = [...][]metric.RecordOption{
		endReleased: {metric.WithAttributeSet(attribute.NewSet(AttrEnd.String(endNames[endReleased])))},
		endLost:     {metric.WithAttributeSet(attribute.NewSet(AttrEnd.String(endNames[endLost])))},
	}
)

// outcomes and waits bound setnxlock's Outcome and WaitKind values.
const (
	outcomes = int(setnxlock.OutcomeError) + 1
	waits    = int(setnxlock.WaitTakeover) + 1
)

// acquireAttributes is the measurement options of an acquisition's
// outcome and way of waiting, and its key's attribute, if any.
func (o *observer) acquireAttributes(e setnxlock.Event) []metric.RecordOption {
	outcome, wait := int(e.Outcome), int(e.Wait)
	kv, keyed := o.keyAttribute(e.Key)
	if !keyed && outcome >= 0 && outcome < outcomes && wait >= 0 && wait < waits {
		return acquireSets[outcome][wait]
	}
	attrs := []attribute.KeyValue{AttrOutcome.String(e.Outcome.String()), AttrWait.String(e.Wait.String())}
	if keyed {
		attrs = append(attrs, kv)
	}
	return []metric.RecordOption{metric.WithAttributes(attrs...)}
}

// endAttributes is the measurement options of a hold's end, and its key's
// attribute, if any.
func (o *observer) endAttributes(key string, end int) []metric.RecordOption {
	if kv, keyed := o.keyAttribute(key); keyed {
		return []metric.RecordOption{metric.WithAttributes(AttrEnd.String(endNames[end]), kv)}
	}
	return endSets[end]
}

// keyOption is the measurement option of key's attribute, if any.
func (o *observer) keyOption(key string) []metric.AddOption {
	if kv, ok := o.keyAttribute(key); ok {
		return []metric.AddOption{metric.WithAttributes(kv)}
	}
	return nil
}

func (o *observer) keyAttribute(key string) (attribute.KeyValue, bool) {
	if o.keyAttr == nil {
		return attribute.KeyValue{}, false
	}
	value := o.keyAttr(key)
	return AttrKey.String(value), value != ""
}

// spanNames are the spans' names, by call.
var spanNames = map[setnxlock.Call]string{
	setnxlock.CallAcquire:    "setnxlock." + setnxlock.CallAcquire.String(),
	setnxlock.CallTryAcquire: "setnxlock." + setnxlock.CallTryAcquire.String(),
	setnxlock.CallRelease:    "setnxlock." + setnxlock.CallRelease.String(),
}

// BeginCall starts the span of an Acquire, TryAcquire or Release in the
// caller's context (a span of kind internal), and returns the function that
// ends it with the call's attempts, way of waiting and outcome.
func (o *observer) BeginCall(ctx context.Context, call setnxlock.Call, key string) (context.Context, func(setnxlock.CallResult)) {
	ctx, span := o.tracer.Start(ctx, spanNames[call])
	if kv, ok := o.keyAttribute(key); ok && span.IsRecording() {
		span.SetAttributes(kv)
	}
	return ctx, func(r setnxlock.CallResult) {
		defer span.End()
		if !span.IsRecording() { // not sampled: nothing to describe
			return
		}
		e := r.Event
		if call == setnxlock.CallRelease {
			switch {
			case e.Kind == setnxlock.EventReleased:
				span.SetAttributes(AttrEnd.String("released"), AttrPath.String(e.Path.String()))
			case e.Kind == setnxlock.EventLost:
				span.SetAttributes(AttrEnd.String("lost"))
			}
		} else {
			outcome := e.Outcome.String()
			if e.Kind == 0 && errors.Is(r.Err, setnxlock.ErrNotAcquired) {
				outcome = "refused" // TryAcquire: a live holder
			} else if e.Kind == 0 {
				outcome = "error"
			}
			span.SetAttributes(AttrOutcome.String(outcome), AttrWait.String(e.Wait.String()), AttrAttempts.Int(e.Attempts))
			if e.Path != setnxlock.PathNone {
				span.SetAttributes(AttrPath.String(e.Path.String()))
			}
		}
		if r.Err != nil && !(call == setnxlock.CallTryAcquire && errors.Is(r.Err, setnxlock.ErrNotAcquired)) {
			span.RecordError(r.Err)
			span.SetStatus(codes.Error, r.Err.Error())
		}
	}
}
