package setnxlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/setnxlock/setnxlock"
)

// Move stock between two warehouses: both locks or neither. Groups that
// overlap, in any order, never deadlock: all keys are taken at once.
func ExampleLocker_AcquireMany() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client, setnxlock.WithTTL(10*time.Second))

	waitCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := locker.AcquireMany(waitCtx, "stock.berlin", "stock.paris")
	if err != nil {
		fmt.Println(err) // ErrNotAcquired when waitCtx ended first; ErrInvalidArgument, ErrCrossSlot, ...
		return
	}
	fmt.Println("holding", lock.Keys(), "until", lock.ExpiresAt().After(time.Now()))

	_, err = locker.TryAcquire(context.Background(), "stock.paris")
	fmt.Println("paris alone:", errors.Is(err, setnxlock.ErrNotAcquired))

	fmt.Println("release:", lock.Release(context.Background())) // every key at once
	// Output:
	// holding [stock.berlin stock.paris] until true
	// paris alone: true
	// release: <nil>
}

// One attempt, all or none: a single member held refuses the group, and
// nothing is written to the others.
func ExampleLocker_TryAcquireMany() {
	client, done := newClient()
	defer done()
	locker, _ := setnxlock.New(client)

	held, _ := locker.TryAcquire(context.Background(), "seat.12B")
	_, err := locker.TryAcquireMany(context.Background(), "seat.12A", "seat.12B")
	fmt.Println("12A and 12B:", errors.Is(err, setnxlock.ErrNotAcquired))
	fmt.Println("12A written:", client.Exists(context.Background(), "seat.12A").Val() == 1)
	_ = held.Release(context.Background())

	pair, err := locker.TryAcquireMany(context.Background(), "seat.12A", "seat.12B")
	fmt.Println("after the release:", err, pair.Key(), pair.Keys())
	_ = pair.Release(context.Background())
	// Output:
	// 12A and 12B: true
	// 12A written: false
	// after the release: <nil> seat.12A [seat.12A seat.12B]
}
