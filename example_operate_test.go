package setnxlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock"
)

// sentCommands is a go-redis hook that records the names of the commands a
// client sends, alone or in pipelines and transactions.
type sentCommands struct {
	mu    sync.Mutex
	names []string
}

func (s *sentCommands) record(cmds ...redis.Cmder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cmd := range cmds {
		s.names = append(s.names, cmd.Name())
	}
}

func (s *sentCommands) sent(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.names, name)
}

func (s *sentCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sentCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.record(cmd)
		return next(ctx, cmd)
	}
}

func (s *sentCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.record(cmds...)
		return next(ctx, cmds)
	}
}

// For servers, proxies and ACL users where scripting is disabled or
// audited: the same locks with no EVAL or EVALSHA. A Locker also falls back
// to this by itself once the server refuses a script.
func ExampleWithoutScripts() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	commands := &sentCommands{}
	client.AddHook(commands)
	locker, _ := setnxlock.New(client, setnxlock.WithoutScripts())

	lock, err := locker.TryAcquire(ctx, "lock.report")
	fmt.Println(err, lock.Release(ctx))
	fmt.Println("sent a script:", commands.sent("evalsha") || commands.sent("eval"))
	// Output:
	// <nil> <nil>
	// sent a script: false
}

// The commands of the SETNX page itself, and the transactions around
// them: no scripts and no SET options either.
func ExampleWithClassicCommands() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	commands := &sentCommands{}
	client.AddHook(commands)
	locker, _ := setnxlock.New(client, setnxlock.WithClassicCommands())

	lock, err := locker.TryAcquire(ctx, "lock.report")
	fmt.Println(err, lock.Release(ctx))
	fmt.Println("sent SETNX:", commands.sent("setnx"))
	fmt.Println("sent a script:", commands.sent("evalsha") || commands.sent("eval"))
	// Output:
	// <nil> <nil>
	// sent SETNX: true
	// sent a script: false
}

// An operator breaks a lock whose holder is stuck. The holder is not told;
// its Release then reports that the lock was no longer its own.
func ExampleLocker_ForceRelease() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	app, _ := setnxlock.New(client)
	operator, _ := setnxlock.New(client)

	stuck, _ := app.TryAcquire(ctx, "lock.report")
	deleted, err := operator.ForceRelease(ctx, "lock.report")
	fmt.Println("deleted a live lease:", deleted.Held, deleted.Format, err)
	fmt.Println("the holder's release:", errors.Is(stuck.Release(ctx), setnxlock.ErrNotHeld))

	nothing, err := operator.ForceRelease(ctx, "lock.report")
	fmt.Println("again:", nothing.Exists, err)
	// Output:
	// deleted a live lease: true TokenFormat <nil>
	// the holder's release: true
	// again: false <nil>
}

// A Locker reports what happens to its locks: here it is refused while a
// crashed holder's lease lasts, recovers the lock once the lease has
// ended, and releases it.
func ExampleWithObserver() {
	client, done := newClient()
	defer done()
	ctx := context.Background()
	clock := setnxlock.NewManualClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	report := setnxlock.ObserverFunc(func(e setnxlock.Event) {
		fmt.Println(e.Kind, e.Key, e.ExpiresAt.Format(time.TimeOnly))
	})
	crashed, _ := setnxlock.New(client, setnxlock.WithClock(clock))
	locker, _ := setnxlock.New(client, setnxlock.WithClock(clock), setnxlock.WithObserver(report))

	_, _ = crashed.TryAcquire(ctx, "lock.report") // ...and its process dies
	_, _ = locker.TryAcquire(ctx, "lock.report")
	clock.Advance(10 * time.Second)
	lock, _ := locker.TryAcquire(ctx, "lock.report")
	_ = lock.Release(ctx)
	// Output:
	// contended lock.report 12:00:10
	// recovered lock.report 12:00:20
	// released lock.report 12:00:20
}

// The pub/sub channel on which releases of a key are announced, for ACL
// rules (&pattern) and for watching with redis-cli.
func ExampleWakeChannel() {
	fmt.Println(setnxlock.WakeChannel("lock.report"))
	// Output: setnxlock:released:lock.report
}

// Where an election lives: its lock, its record of who leads, and the
// channel a new leader publishes on. The keys share a Cluster slot.
func ExampleElectionKey() {
	fmt.Println(setnxlock.ElectionKey("scheduler"))
	fmt.Println(setnxlock.LeaderKey("scheduler"))
	fmt.Println(setnxlock.LeaderChannel("scheduler"))
	// Output:
	// {scheduler}.election
	// {scheduler}.leader
	// setnxlock:leader:scheduler
}
