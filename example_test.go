package setnxlock_test

import (
	"context"
	"errors"
	"fmt"
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
	ctx := context.Background()

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
	ctx := context.Background()
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
