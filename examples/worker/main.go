// Command worker runs a pool of workers, each with its own connection and
// Locker as if it were a separate process, that increment a counter stored
// in Redis with GET and SET. Without the lock, updates are lost; with a
// blocking Acquire around each increment, none are.
//
//	cd examples && go run ./worker               # embedded miniredis
//	cd examples && go run ./worker -addr 127.0.0.1:6379 -workers 8
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/examples/internal/demo"
)

const (
	lockKey    = "lock.demo.counter"
	counterKey = "demo.counter"
)

func main() {
	addr := demo.AddrFlag()
	workers := flag.Int("workers", 4, "number of workers")
	increments := flag.Int("increments", 50, "increments per worker")
	flag.Parse()

	addrToUse, where, stop := demo.Redis(*addr)
	defer stop()
	fmt.Printf("%d workers x %d increments of %s on %s\n", *workers, *increments, counterKey, where)
	for _, locked := range []bool{false, true} {
		got, took, err := count(addrToUse, *workers, *increments, locked)
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			stop()
			os.Exit(1)
		}
		mode := "without a lock"
		if locked {
			mode = "with Acquire "
		}
		fmt.Printf("  %s: counter = %4d of %d in %v\n", mode, got, *workers**increments, took.Round(time.Millisecond))
	}
}

// count resets the counter, runs the workers and returns the final count.
func count(addr string, workers, increments int, locked bool) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.Set(ctx, counterKey, 0, 0).Err(); err != nil {
		return 0, 0, err
	}

	start := time.Now()
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- work(ctx, addr, increments, locked)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	n, err := admin.Get(ctx, counterKey).Int()
	return n, time.Since(start), err
}

// work is one worker: read, think, write back, increments times.
func work(ctx context.Context, addr string, increments int, locked bool) error {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	locker, err := setnxlock.New(client, setnxlock.WithTTL(5*time.Second), setnxlock.WithBackoff(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		return err
	}
	for range increments {
		var lock *setnxlock.Lock
		if locked {
			if lock, err = locker.Acquire(ctx, lockKey); err != nil {
				return err
			}
		}
		n, err := client.Get(ctx, counterKey).Int()
		if err != nil {
			return err
		}
		time.Sleep(200 * time.Microsecond) // the work between read and write
		if err := client.Set(ctx, counterKey, n+1, 0).Err(); err != nil {
			return err
		}
		if lock != nil {
			if err := lock.Release(ctx); err != nil {
				return fmt.Errorf("lease lost before the increment was done: %w", err)
			}
		}
	}
	return nil
}
