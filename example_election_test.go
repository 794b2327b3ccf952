package setnxlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/setnxlock/setnxlock"
)

// One replica of a service leads; the others wait in Campaign and take over
// when it resigns or its lease runs out.
func ExampleLocker_Campaign() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	locker, _ := setnxlock.New(client, setnxlock.WithTTL(15*time.Second))

	// Campaign waits as long as its context lets it; a won leadership
	// lasts until Resign or its loss, renewing itself meanwhile.
	lead, err := locker.Campaign(ctx, "scheduler", "replica-a:8080")
	if err != nil {
		panic(err)
	}
	fmt.Println("leading in term", lead.Term())
	work := lead.Context(ctx) // cancelled if the leadership is lost
	_ = work
	fmt.Println(lead.Resign(ctx), lead.Err())
	// Output:
	// leading in term 1
	// <nil> <nil>
}

// Any replica, or a process in another language, reads who leads.
func ExampleLocker_Leader() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	locker, _ := setnxlock.New(client)

	_, err := locker.Leader(ctx, "scheduler")
	fmt.Println(errors.Is(err, setnxlock.ErrNoLeader))

	lead, _ := locker.Campaign(ctx, "scheduler", "replica-a:8080")
	leader, _ := locker.Leader(ctx, "scheduler")
	fmt.Println(leader.Value, leader.Term)
	// What another language reads: the record, believed while the lock
	// key's value carries the same owner token and a future end.
	fmt.Println(setnxlock.ElectionKey("scheduler"), setnxlock.LeaderKey("scheduler"))
	_ = lead.Resign(ctx)
	// Output:
	// true
	// replica-a:8080 1
	// {scheduler}.election {scheduler}.leader
}

// Follow an election: the current leader at once, then each change.
func ExampleLocker_Observe() {
	client, done := newClient()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	locker, _ := setnxlock.New(client)

	first, _ := locker.Campaign(ctx, "scheduler", "a")
	changes := locker.Observe(ctx, "scheduler")
	fmt.Println((<-changes).Value) // bounded: a leader is delivered at once
	_ = first.Resign(ctx)
	fmt.Printf("%q\n", (<-changes).Value) // bounded: heard, or read within a poll (1s); the zero Leader: nobody leads
	second, _ := locker.Campaign(ctx, "scheduler", "b")
	next := <-changes // bounded: heard, or read within a poll
	fmt.Println(next.Value, next.Term > first.Term())
	_ = second.Resign(ctx)
	// Output:
	// a
	// ""
	// b true
}

// The service idiom: run the leader's work for as long as this replica
// leads; campaign again after a loss.
func ExampleLocker_Lead() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	locker, _ := setnxlock.New(client, setnxlock.WithTTL(15*time.Second))

	err := locker.Lead(ctx, "scheduler", "replica-a:8080", func(ctx context.Context) error {
		lead := setnxlock.LeadershipFrom(ctx)
		fmt.Println("scheduling as the leader of term", lead.Term())
		// A real scheduler loops here until ctx is cancelled (a loss, or
		// the service shutting down), passing lead.Term() with each write.
		return nil
	})
	fmt.Println(err)
	_, err = locker.Leader(ctx, "scheduler")
	fmt.Println(errors.Is(err, setnxlock.ErrNoLeader))
	// Output:
	// scheduling as the leader of term 1
	// <nil>
	// true
}

func ExampleLeadership_Resign() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	locker, _ := setnxlock.New(client)

	lead, _ := locker.Campaign(ctx, "scheduler", "a")
	fmt.Println(lead.Resign(ctx))
	<-lead.Done()                             // bounded: closed by Resign
	fmt.Println(lead.Err(), lead.Resign(ctx)) // resigning again is nil
	// Output:
	// <nil>
	// <nil> <nil>
}
