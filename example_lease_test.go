package setnxlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/setnxlock/setnxlock"
)

// The work runs under the lock's context, which is cancelled when the lock
// is lost: here its lease runs out with no renewal (the clock is moved past
// it), and the cause says so.
func ExampleLock_Context() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	locker, _ := setnxlock.New(client, setnxlock.WithClock(clock))

	lock, _ := locker.TryAcquire(ctx, "lock.import")
	work := lock.Context(ctx)
	fmt.Println("working:", work.Err() == nil)

	clock.Advance(11 * time.Second) // the 10s lease ends with no renewal
	select {
	case <-work.Done():
		fmt.Println("cancelled:", errors.Is(context.Cause(work), setnxlock.ErrNotHeld))
	case <-time.After(10 * time.Second):
		fmt.Println("the work was never cancelled")
	}
	// Output:
	// working: true
	// cancelled: true
}

// Done closes once the lock is over; Err then says how it ended: nil after
// a Release, an ErrNotHeld error after a loss.
func ExampleLock_Done() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	locker, _ := setnxlock.New(client, setnxlock.WithClock(clock))

	released, _ := locker.TryAcquire(ctx, "lock.a")
	_ = released.Release(ctx)
	<-released.Done() // bounded: closed by Release
	fmt.Println("released:", released.Err())

	lost, _ := locker.TryAcquire(ctx, "lock.b")
	clock.Advance(11 * time.Second) // its 10s lease ends with no renewal
	select {
	case <-lost.Done():
		fmt.Println("lost:", errors.Is(lost.Err(), setnxlock.ErrNotHeld))
	case <-time.After(10 * time.Second):
		fmt.Println("the loss was never signalled")
	}
	// Output:
	// released: <nil>
	// lost: true
}

// Renewals follow the Locker's clock: moving a ManualClock to the next
// renewal makes the lock renew its lease from that instant.
func ExampleWithRefreshInterval() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	locker, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithRefreshInterval(2*time.Second))

	lock, _ := locker.TryAcquire(ctx, "lock.import")
	defer lock.Release(ctx)
	first := lock.ExpiresAt()
	fmt.Println("lease until", first.Format(time.TimeOnly))

	clock.Advance(2 * time.Second) // a renewal is due
	for deadline := time.Now().Add(10 * time.Second); lock.ExpiresAt().Equal(first) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // the renewal is a round trip in the background
	}
	fmt.Println("renewed until", lock.ExpiresAt().Format(time.TimeOnly))
	// Output:
	// lease until 12:00:10
	// renewed until 12:00:12
}

// A test moves a ManualClock instead of sleeping; After fires once the
// clock has been moved far enough.
func ExampleManualClock_After() {
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	fired := clock.After(time.Minute)

	clock.Advance(30 * time.Second)
	select {
	case <-fired:
		fmt.Println("fired too early")
	default:
		fmt.Println("after 30s: not yet")
	}
	clock.Advance(30 * time.Second)
	select {
	case at := <-fired:
		fmt.Println("after 60s: fired at", at.Format(time.TimeOnly))
	case <-time.After(10 * time.Second):
		fmt.Println("never fired")
	}
	// Output:
	// after 30s: not yet
	// after 60s: fired at 12:01:00
}
