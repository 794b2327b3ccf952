package setnxlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock"
)

// newClient connects to an embedded miniredis so the examples run anywhere;
// in production pass your own *redis.Client, ClusterClient or Ring.
func newClient() (*redis.Client, func()) {
	server := miniredis.NewMiniRedis()
	if err := server.Start(); err != nil {
		panic(err)
	}
	client := redis.NewClient(&redis.Options{Addr: server.Addr()})
	return client, func() { _ = client.Close(); server.Close() }
}

// The whole life of a lock: take it, do the work, give it back.
func Example() {
	client, done := newClient()
	defer done()
	// Acquire waits as long as its context lets it: give it a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	locker, err := setnxlock.New(client, setnxlock.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	lock, err := locker.Acquire(ctx, "lock.nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", lock.Key())
	// ... the work, finished well before lock.ExpiresAt() ...
	if err := lock.Release(ctx); err != nil {
		fmt.Println("the lease was lost before the work ended:", err)
	}
	fmt.Println("released")
	// Output:
	// holding lock.nightly-report
	// released
}

func ExampleNew() {
	client, done := newClient()
	defer done()

	locker, err := setnxlock.New(client,
		setnxlock.WithTTL(5*time.Second),                               // lease length
		setnxlock.WithBackoff(10*time.Millisecond, time.Second),        // Acquire's waits
		setnxlock.WithClock(setnxlock.NewManualClock(time.Unix(0, 0))), // tests only
	)
	fmt.Println(locker.TTL(), err)

	_, err = setnxlock.New(client, setnxlock.WithTTL(0))
	fmt.Println(errors.Is(err, setnxlock.ErrInvalidArgument))
	// Output:
	// 5s <nil>
	// true
}

func ExampleWithTTL() {
	client, done := newClient()
	defer done()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	locker, _ := setnxlock.New(client, setnxlock.WithTTL(90*time.Second), setnxlock.WithClock(clock))

	lock, _ := locker.TryAcquire(context.Background(), "lock.k")
	fmt.Println(lock.ExpiresAt().Format(time.TimeOnly))
	// Output: 12:01:30
}

func ExampleWithClock() {
	client, done := newClient()
	defer done()
	// Any Clock works; every process locking the same keys must agree on
	// the time to well within the TTL.
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	locker, _ := setnxlock.New(client, setnxlock.WithClock(clock))

	lock, _ := locker.TryAcquire(context.Background(), "lock.k")
	fmt.Println(lock.ExpiresAt().Sub(clock.Now()))
	// Output: 10s
}

func ExampleWithBackoff() {
	client, done := newClient()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	holder, _ := setnxlock.New(client)
	waiter, _ := setnxlock.New(client, setnxlock.WithBackoff(time.Millisecond, 20*time.Millisecond))

	lock, _ := holder.TryAcquire(ctx, "lock.k")
	time.AfterFunc(50*time.Millisecond, func() { _ = lock.Release(ctx) })

	next, err := waiter.Acquire(ctx, "lock.k") // polls every 1ms, 2ms, 4ms ... up to 20ms
	fmt.Println(next.Key(), err)
	// Output: lock.k <nil>
}

func ExampleLocker_TryAcquire() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	a, _ := setnxlock.New(client)
	b, _ := setnxlock.New(client)

	lock, err := a.TryAcquire(ctx, "lock.invoices")
	fmt.Println("a:", err)
	_, err = b.TryAcquire(ctx, "lock.invoices")
	fmt.Println("b refused:", errors.Is(err, setnxlock.ErrNotAcquired))

	_ = lock.Release(ctx)
	_, err = b.TryAcquire(ctx, "lock.invoices")
	fmt.Println("b after release:", err)
	// Output:
	// a: <nil>
	// b refused: true
	// b after release: <nil>
}

func ExampleLocker_Acquire() {
	client, done := newClient()
	defer done()
	a, _ := setnxlock.New(client)
	b, _ := setnxlock.New(client)
	_, _ = a.TryAcquire(context.Background(), "lock.invoices") // held and never released

	// Acquire has no deadline of its own: bound the wait with the context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := b.Acquire(ctx, "lock.invoices")
	fmt.Println(errors.Is(err, setnxlock.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}

func ExampleLock_Release() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	slow, _ := setnxlock.New(client, setnxlock.WithClock(clock))
	other, _ := setnxlock.New(client, setnxlock.WithClock(clock))

	lock, _ := slow.TryAcquire(ctx, "lock.k")
	clock.Advance(time.Minute) // the holder stalled past its 10s lease...
	next, _ := other.TryAcquire(ctx, "lock.k")

	// ...so its late Release is refused and leaves the new holder alone.
	fmt.Println(errors.Is(lock.Release(ctx), setnxlock.ErrNotHeld))
	fmt.Println(next.Release(ctx))
	// Output:
	// true
	// <nil>
}

// A crashed holder never releases. With a ManualClock the test moves time
// past its lease instead of waiting, and the lock is recovered with GETSET.
func ExampleNewManualClock() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	crashed, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithTTL(time.Minute))
	waiter, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithTTL(time.Minute))

	_, _ = crashed.TryAcquire(ctx, "lock.k") // ...and then the process dies

	clock.Advance(59 * time.Second)
	_, err := waiter.TryAcquire(ctx, "lock.k")
	fmt.Println("after 59s:", err)

	clock.Set(time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC))
	lock, err := waiter.TryAcquire(ctx, "lock.k")
	fmt.Println("after 60s:", err, "- new lease until", lock.ExpiresAt().Format(time.TimeOnly))
	// Output:
	// after 59s: setnxlock: not acquired: "lock.k" is held until 2026-01-01T00:01:00Z
	// after 60s: <nil> - new lease until 00:02:00
}

// A long job keeps its lock alive with auto-refresh, and stops if the lock
// is lost anyway (here: someone overwrites the key behind its back).
func ExampleWithAutoRefresh() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client, setnxlock.WithTTL(300*time.Millisecond), setnxlock.WithAutoRefresh())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := locker.Acquire(ctx, "lock.import")
	if err != nil {
		panic(err)
	}
	work := lock.Context(ctx) // cancelled when the lock is lost or released

	time.Sleep(time.Second) // three leases' worth of work: the lease is renewed every 100ms
	fmt.Println("still held after 1s:", work.Err() == nil)

	client.Set(ctx, "lock.import", "1", 0) // an intruder
	<-work.Done()                          // bounded: by ctx; the next renewal, refused, ends it first
	fmt.Println("lost:", errors.Is(context.Cause(work), setnxlock.ErrNotHeld))
	// Output:
	// still held after 1s: true
	// lost: true
}

func ExampleLock_Refresh() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	locker, _ := setnxlock.New(client, setnxlock.WithClock(clock))

	lock, _ := locker.TryAcquire(ctx, "lock.k")
	clock.Advance(8 * time.Second)
	if err := lock.Refresh(ctx, time.Minute); err != nil {
		fmt.Println("lost:", err)
	}
	fmt.Println(lock.ExpiresAt().Format(time.TimeOnly))
	// Output: 12:01:08
}

// A job that must hold its key for at least a minute, even when its work
// ends sooner (a daily report run from several hosts: whoever comes second
// within the minute must not run it again), stops renewing and leaves the
// lease to end at that instant.
func ExampleLock_Orphan() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	locker, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithTTL(10*time.Second), setnxlock.WithAutoRefresh())

	lock, _ := locker.TryAcquire(ctx, "lock.report")
	// ... the work, done in 5s, while the lease is renewed ...
	clock.Advance(5 * time.Second)
	lock.Orphan()                         // no more renewals; the key stays ours
	_ = lock.Refresh(ctx, 55*time.Second) // once: the lease now ends a minute after it began
	fmt.Println("left to end at", lock.ExpiresAt().Format(time.TimeOnly))

	_, err := locker.TryAcquire(ctx, "lock.report")
	fmt.Println("a second run:", errors.Is(err, setnxlock.ErrNotAcquired))

	clock.Set(lock.ExpiresAt())
	select {
	case <-lock.Done(): // the lease has run out by the Locker's clock
		fmt.Println("ended:", errors.Is(lock.Err(), setnxlock.ErrNotHeld))
	case <-time.After(10 * time.Second):
		fmt.Println("still held")
	}
	// Output:
	// left to end at 12:01:00
	// a second run: true
	// ended: true
}

// fencedStore is a toy protected resource: it remembers the highest fencing
// token it has accepted and rejects writes that carry a lower one.
type fencedStore struct {
	highest int64
	value   string
}

func (s *fencedStore) write(token int64, value string) error {
	if token < s.highest {
		return fmt.Errorf("rejected: token %d is older than %d", token, s.highest)
	}
	s.highest, s.value = token, value
	return nil
}

// A holder that stalls past its lease keeps its old fencing token; the
// resource rejects its late write because the next holder's token is higher.
func ExampleWithFencing() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithFencing())
	b, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithFencing())
	store := &fencedStore{}

	slow, _ := a.TryAcquire(ctx, "lock.invoice-42")
	clock.Advance(time.Minute) // a stalls (GC, swap) past its 10s lease...
	fast, _ := b.TryAcquire(ctx, "lock.invoice-42")
	fmt.Println("b writes:", store.write(fast.FencingToken(), "paid by b"))
	fmt.Println("a writes:", store.write(slow.FencingToken(), "paid by a"))
	fmt.Println("store:", store.value)
	// Output:
	// b writes: <nil>
	// a writes: rejected: token 1 is older than 2
	// store: paid by b
}

func ExampleFenceKey() {
	fmt.Println(setnxlock.FenceKey("lock.report"))
	fmt.Println(setnxlock.FenceKey("{user42}.lock"))
	// Output:
	// {lock.report}.fence
	// {user42}.lock.fence
}

// Lockers on machines whose clocks disagree can all read the server's
// clock instead (H4).
func ExampleNewServerClock() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock, err := setnxlock.NewServerClock(ctx, client, 30*time.Second)
	if err != nil {
		panic(err)
	}
	defer clock.Close()
	locker, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithSkewMargin(50*time.Millisecond))

	lock, _ := locker.TryAcquire(ctx, "lock.k")
	fmt.Println(lock.Release(ctx), clock.Uncertainty() < time.Second, clock.Steps())
	// Output: <nil> true 0
}

func ExampleWithStarvationThreshold() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	// Every release hands the key to the first waiter in line, however
	// briefly it has waited: strict first come, first served.
	locker, _ := setnxlock.New(client, setnxlock.WithStarvationThreshold(0))

	holder, _ := locker.TryAcquire(ctx, "lock.jobs")
	next := make(chan *setnxlock.Lock, 1)
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	go func() {
		lock, _ := locker.Acquire(waitCtx, "lock.jobs") // queues behind holder
		next <- lock
	}()
	time.Sleep(10 * time.Millisecond) // bounded: it only lets the waiter queue first
	_ = holder.Release(ctx)
	if lock := <-next; lock != nil { // bounded: Acquire gives up with waitCtx
		fmt.Println(lock.Key())
		_ = lock.Release(ctx)
	}
	// Output: lock.jobs
}

func ExampleWithSkewMargin() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	crashed, _ := setnxlock.New(client, setnxlock.WithClock(clock))
	careful, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithSkewMargin(time.Second))

	_, _ = crashed.TryAcquire(ctx, "lock.k")
	clock.Advance(10 * time.Second) // the lease says it has ended...
	_, err := careful.TryAcquire(ctx, "lock.k")
	fmt.Println(errors.Is(err, setnxlock.ErrNotAcquired)) // ...but clocks may differ by up to 1s
	clock.Advance(time.Second)
	_, err = careful.TryAcquire(ctx, "lock.k")
	fmt.Println(err)
	// Output:
	// true
	// <nil>
}

func ExampleWithExpiryGrace() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	locker, _ := setnxlock.New(client, setnxlock.WithTTL(10*time.Second), setnxlock.WithExpiryGrace(5*time.Second))

	_, _ = locker.TryAcquire(ctx, "lock.k") // and crash: nobody ever takes it over
	fmt.Println(client.PTTL(ctx, "lock.k").Val().Round(time.Second))
	// Output: 15s
}

func ExampleNewSlogObserver() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level:       slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return dropTimes(a) },
	}))
	locker, _ := setnxlock.New(client, setnxlock.WithObserver(setnxlock.NewSlogObserver(logger)))

	lock, _ := locker.TryAcquire(ctx, "lock.k")
	_ = lock.Release(ctx)
	// Output:
	// level=DEBUG msg="setnxlock: acquired" key=lock.k outcome=acquired attempts=1 wait=none
	// level=DEBUG msg="setnxlock: released" key=lock.k
}

// dropTimes keeps the example's output stable: no instants, no durations.
func dropTimes(a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey || a.Key == "expires_at" || a.Key == "waited" || a.Key == "held" {
		return slog.Attr{}
	}
	return a
}

func ExampleObserverFunc() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	contended := 0
	count := setnxlock.ObserverFunc(func(e setnxlock.Event) {
		if e.Kind == setnxlock.EventContended {
			contended++
		}
	})
	a, _ := setnxlock.New(client)
	b, _ := setnxlock.New(client, setnxlock.WithObserver(count))

	_, _ = a.TryAcquire(ctx, "lock.k")
	_, _ = b.TryAcquire(ctx, "lock.k")
	_, _ = b.TryAcquire(ctx, "lock.k")
	fmt.Println("contended:", contended)
	// Output: contended: 2
}

// callPrinter traces calls by printing them; a real one opens a span in
// BeginCall and ends it in the function it returns (setnxlockotel does).
type callPrinter struct{ setnxlock.ObserverFunc }

func (callPrinter) BeginCall(ctx context.Context, call setnxlock.Call, key string) (context.Context, func(setnxlock.CallResult)) {
	fmt.Println("begin", call, key)
	return ctx, func(r setnxlock.CallResult) {
		fmt.Println("end", call, r.Event.Kind, "attempts:", r.Event.Attempts, "not acquired:", errors.Is(r.Err, setnxlock.ErrNotAcquired))
	}
}

// A CallObserver hears each Acquire, TryAcquire and Release in the
// caller's context, with the event that ended it.
func ExampleCallObserver() {
	client, done := newClient()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tracer := callPrinter{func(e setnxlock.Event) { fmt.Println("  event", e.Kind) }}
	locker, _ := setnxlock.New(client, setnxlock.WithObserver(tracer))

	lock, _ := locker.Acquire(ctx, "lock.k")
	_, _ = locker.TryAcquire(ctx, "lock.k")
	_ = lock.Release(ctx)
	// Output:
	// begin acquire lock.k
	//   event acquired
	// end acquire acquired attempts: 1 not acquired: false
	// begin try_acquire lock.k
	//   event contended
	// end try_acquire unknown attempts: 0 not acquired: true
	// begin release lock.k
	//   event released
	// end release released attempts: 0 not acquired: false
}

// A Go service joining PHP or Node services that lock the classic way on
// the same keys: write bare Unix milliseconds, as npm redis-lock does.
func ExampleWithFormat() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.UnixMilli(1795348800000))
	locker, _ := setnxlock.New(client,
		setnxlock.WithFormat(setnxlock.UnixMillis),
		setnxlock.WithTTL(5*time.Second),
		setnxlock.WithClock(clock))

	lock, _ := locker.TryAcquire(ctx, "lock.invoices")
	fmt.Println(client.Get(ctx, "lock.invoices").Val()) // now + timeout + 1
	fmt.Println(lock.Release(ctx))
	// Output:
	// 1795348805001
	// <nil>
}

// Who holds a lock, for people and for any language: the identity follows
// the owner token in the value, where GET shows it and classic clients,
// which read only the leading number, ignore it.
func ExampleWithIdentity() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.UnixMilli(1795348800000))
	locker, _ := setnxlock.New(client,
		setnxlock.WithIdentity("nightly-report@web-1"), // default: host name and process id
		setnxlock.WithTTL(5*time.Second),
		setnxlock.WithClock(clock))

	lock, _ := locker.TryAcquire(ctx, "lock.report")
	value := client.Get(ctx, "lock.report").Val()
	end, rest, _ := strings.Cut(value, ":")
	_, identity, _ := strings.Cut(rest, "|") // after the 26-character owner token
	fmt.Println(end, identity)
	status, _ := locker.Status(ctx, "lock.report")
	fmt.Println("held by", status.Identity)
	_ = lock.Release(ctx)

	_, err := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithIdentity("two\nlines"))
	fmt.Println(errors.Is(err, setnxlock.ErrInvalidArgument))
	// Output:
	// 1795348805000 nightly-report@web-1
	// held by nightly-report@web-1
	// true
}

// Two workers on one key: the second waits in the key's queue, and the
// first one's Release hands the lock straight to it. Close stops the
// waiting Locker's background listening once it is no longer needed.
func ExampleLocker_Close() {
	client, done := newClient()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	first, _ := setnxlock.New(client)
	second, _ := setnxlock.New(client)
	defer second.Close()

	lock, _ := first.Acquire(ctx, "lock.queue")
	handed := make(chan *setnxlock.Lock)
	go func() {
		next, err := second.Acquire(ctx, "lock.queue") // queues, then is handed the lock
		if err != nil {
			panic(err)
		}
		handed <- next
	}()
	time.Sleep(50 * time.Millisecond) // let the second worker queue
	_ = lock.Release(ctx)
	select {
	case next := <-handed:
		fmt.Println("second worker holds", next.Key())
		_ = next.Release(ctx)
	case <-ctx.Done():
		fmt.Println("no handoff:", ctx.Err())
	}
	// Output:
	// second worker holds lock.queue
}

// What a key holds, read from the outside, and an operator's override.
func ExampleLocker_Status() {
	client, done := newClient()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	locker, _ := setnxlock.New(client, setnxlock.WithFormat(setnxlock.UnixSeconds))
	_, _ = locker.TryAcquire(ctx, "lock.report")
	status, err := locker.Status(ctx, "lock.report")
	if err != nil {
		panic(err)
	}
	fmt.Println("held:", status.Held, "format:", status.Format, "waiters:", status.Waiters)

	deleted, _ := locker.ForceRelease(ctx, "lock.report") // whoever holds it
	fmt.Println("deleted a lease in", deleted.Format)
	status, _ = locker.Status(ctx, "lock.report")
	fmt.Println("exists:", status.Exists)
	// Output:
	// held: true format: UnixSeconds waiters: 0
	// deleted a lease in UnixSeconds
	// exists: false
}

// What is locked right now: every lock key that matches a pattern, found
// with SCAN, with its holder, its end and its waiters.
func ExampleLocker_ScanStatus() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	web1, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithIdentity("web-1:4242"))
	cron, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithFormat(setnxlock.UnixSeconds))
	_, _ = web1.TryAcquire(ctx, "lock.invoices")
	_, _ = cron.TryAcquire(ctx, "lock.backup")
	_ = client.Set(ctx, "session.42", "not a lock", 0).Err()

	statuses, err := web1.ScanStatus(ctx, "lock.*")
	if err != nil {
		panic(err)
	}
	for _, s := range statuses {
		fmt.Println(s.Key, s.Held, s.ExpiresAt.Format(time.TimeOnly), s.Format, s.Identity, s.Waiters)
	}
	// Output:
	// lock.backup true 12:00:11 UnixSeconds  0
	// lock.invoices true 12:00:10 TokenFormat web-1:4242 0
}

// With replicas a lease is granted only once they have it. The embedded
// server of this example has none, so the acquisition is refused and
// undone; with a Sentinel deployment pass redis.NewFailoverClient's client.
func ExampleWithReplicas() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	locker, _ := setnxlock.New(client, setnxlock.WithReplicas(1, 50*time.Millisecond))

	_, err := locker.TryAcquire(ctx, "lock.report")
	fmt.Println(errors.Is(err, setnxlock.ErrNotReplicated))
	fmt.Println(err)
	fmt.Println(client.Exists(ctx, "lock.report").Val()) // nothing left behind
	// Output:
	// true
	// setnxlock: not acknowledged by enough replicas: "lock.report": 0 of 1 replicas acknowledged within 50ms
	// 0
}

// Do runs a job under a lock: the lease is renewed while the job runs, the
// job's context ends if the lock is lost, and the lock is released when
// the job returns, errs or panics.
func ExampleLocker_Do() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client, setnxlock.WithTTL(10*time.Second))

	err := locker.Do(context.Background(), "lock.nightly-report", func(ctx context.Context) error {
		// ... the job: pass ctx to every call, and stop when it ends ...
		fmt.Println("running the report under the lock")
		return ctx.Err()
	})
	fmt.Println("done:", err, errors.Is(err, setnxlock.ErrNotHeld))
	// Output:
	// running the report under the lock
	// done: <nil> false
}
