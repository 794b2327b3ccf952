package setnxlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/setnxlock/setnxlock"
)

// At most two GPU jobs at once, across every process that uses the
// semaphore "gpu": a permit is a lock, released like one.
func ExampleLocker_Semaphore() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client, setnxlock.WithTTL(10*time.Second))
	gpu, err := locker.Semaphore("gpu", 2)
	if err != nil {
		fmt.Println(err) // ErrInvalidArgument: an empty name, fewer than one permit
		return
	}

	first, _ := gpu.TryAcquire(context.Background())
	second, _ := gpu.TryAcquire(context.Background())
	_, err = gpu.TryAcquire(context.Background())
	fmt.Println("third:", errors.Is(err, setnxlock.ErrNotAcquired))
	fmt.Println("permits held on", first.Key(), "and", second.Key())
	_ = first.Release(context.Background())
	_ = second.Release(context.Background())
	// Output:
	// third: true
	// permits held on {gpu}.permit.0 and {gpu}.permit.1
}

// Acquire waits for a permit, in arrival order, until its context ends.
func ExampleSemaphore_Acquire() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client)
	partnerAPI, _ := locker.Semaphore("partner-api", 1)

	held, _ := partnerAPI.Acquire(context.Background())
	waitCtx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := partnerAPI.Acquire(waitCtx)
	fmt.Println("while held:", errors.Is(err, setnxlock.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))

	go func() {
		time.Sleep(10 * time.Millisecond)
		_ = held.Release(context.Background()) // handed to the waiter below
	}()
	next, err := partnerAPI.Acquire(context.Background())
	fmt.Println("after the release:", err, next.Key())
	_ = next.Release(context.Background())
	// Output:
	// while held: true true
	// after the release: <nil> {partner-api}.permit.0
}

// Do runs the work under a permit, renewed while it runs and released
// when it returns, errs or panics.
func ExampleSemaphore_Do() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client)
	gpu, _ := locker.Semaphore("gpu", 4)

	err := gpu.Do(context.Background(), func(ctx context.Context) error {
		fmt.Println("training under one of 4 permits")
		return ctx.Err()
	})
	fmt.Println("done:", err)
	// Output:
	// training under one of 4 permits
	// done: <nil>
}

// Every client of a semaphore must agree on its count: the first
// acquisition records it, and a client that asks for another is refused,
// writing nothing.
func ExampleSemaphore_Status() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client, setnxlock.WithIdentity("worker-7"))
	gpu, _ := locker.Semaphore("gpu", 2)
	permit, _ := gpu.Acquire(context.Background())

	other, _ := locker.Semaphore("gpu", 3)
	_, err := other.TryAcquire(context.Background())
	fmt.Println("another count:", errors.Is(err, setnxlock.ErrPermitsMismatch))

	status, _ := gpu.Status(context.Background())
	fmt.Println("permits:", status.Permits, "holders:", len(status.Holders), "held by:", status.Holders[0].Identity)
	_ = permit.Release(context.Background())
	// Output:
	// another count: true
	// permits: 2 holders: 1 held by: worker-7
}

// Resize changes the recorded count: an operator's act. Shrinking revokes
// no live permit.
func ExampleSemaphore_Resize() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client)
	gpu, _ := locker.Semaphore("gpu", 2)
	permit, _ := gpu.Acquire(context.Background())

	_ = gpu.Resize(context.Background(), 4)
	fmt.Println("now:", gpu.Permits(), "recorded at", setnxlock.PermitsKey("gpu"))
	_ = permit.Release(context.Background())
	// Output:
	// now: 4 recorded at {gpu}.permits
}
