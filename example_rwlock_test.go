package setnxlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/setnxlock/setnxlock"
)

// Any number of readers of the price list at once, or one writer: each
// holds a lock, released like one.
func ExampleLocker_RWLock() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client, setnxlock.WithTTL(10*time.Second))
	prices, err := locker.RWLock("prices")
	if err != nil {
		fmt.Println(err) // ErrInvalidArgument: an empty name, a format without owner tokens
		return
	}

	first, _ := prices.TryRLock(context.Background())
	second, err := prices.TryRLock(context.Background())
	fmt.Println("two readers:", err)
	_, err = prices.TryLock(context.Background())
	fmt.Println("a writer beside them:", errors.Is(err, setnxlock.ErrNotAcquired))
	_ = first.Release(context.Background())
	_ = second.Release(context.Background())

	writer, _ := prices.TryLock(context.Background())
	fmt.Println("the writer holds", writer.Key())
	_ = writer.Release(context.Background())
	// Output:
	// two readers: <nil>
	// a writer beside them: true
	// the writer holds {prices}.writer
}

// RLock waits while a writer holds the lock or waits for it, in one line
// with the writers, until its context ends.
func ExampleRWLock_RLock() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client)
	prices, _ := locker.RWLock("prices")

	writer, _ := prices.Lock(context.Background())
	waitCtx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := prices.RLock(waitCtx)
	fmt.Println("while written:", errors.Is(err, setnxlock.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))

	go func() {
		time.Sleep(10 * time.Millisecond)
		_ = writer.Release(context.Background()) // handed to the reader below
	}()
	reader, err := prices.RLock(context.Background())
	fmt.Println("after the release:", err)
	_ = reader.Release(context.Background())
	// Output:
	// while written: true true
	// after the release: <nil>
}

// Lock waits for the readers admitted before it; no reader is admitted
// meanwhile.
func ExampleRWLock_Lock() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client)
	prices, _ := locker.RWLock("prices")

	reader, _ := prices.RLock(context.Background())
	go func() {
		time.Sleep(10 * time.Millisecond)
		_ = reader.Release(context.Background())
	}()
	writer, err := prices.Lock(context.Background())
	fmt.Println("the writer got in:", err)
	_ = writer.Release(context.Background())
	// Output:
	// the writer got in: <nil>
}

// Status tells who holds the lock: the writer, the live readers and who
// waits, without writing anything.
func ExampleRWLock_Status() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client, setnxlock.WithIdentity("report-builder"))
	prices, _ := locker.RWLock("prices")

	reader, _ := prices.RLock(context.Background())
	status, _ := prices.Status(context.Background())
	fmt.Println("writer:", status.Writer.Held, "readers:", len(status.Readers), status.Readers[0].Identity)
	_ = reader.Release(context.Background())
	// Output:
	// writer: false readers: 1 report-builder
}
