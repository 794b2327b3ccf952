package chaos

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/setnxlock/setnxlock"
)

// The liveness checks of a run's end, once every fault has stopped and
// every client is gone: each key is acquired within a bound by a fresh
// Locker of the mode, each key's queue of waiters drains, and the
// harness's process has no more goroutines than before the run.

// Final is what those checks found.
type Final struct {
	Bound      time.Duration            // for each key's acquisition, and for the queues to drain
	Acquired   map[string]time.Duration // how long each key took to acquire
	Slowest    time.Duration            // the longest of them
	Drained    time.Duration            // how long until every queue was empty, after the keys were released
	Goroutines [2]int                   // before the run, and after every Locker closed
	Violations []Violation
}

// finalChecks acquires and releases every key, then waits for the queues
// to drain.
func finalChecks(cfg Config, servers *backend) Final {
	f := Final{Bound: cfg.finalBound(), Acquired: map[string]time.Duration{}}
	wc := WorkerConfig{Redis: servers.nodeAddrs(), Cluster: servers.cluster, Password: aclPassword,
		Locker: lockerFor(cfg.Mode, 0), Loops: 1, ReadTimeout: cfg.ReadTimeout}
	client := newRedisClient(wc, nil)
	defer client.Close()
	locker, err := setnxlock.New(client, append([]setnxlock.Option{setnxlock.WithTTL(cfg.TTL),
		setnxlock.WithSkewMargin(cfg.Margin), setnxlock.WithBackoff(cfg.MinBackoff, cfg.MaxBackoff)}, wc.Locker.Options()...)...)
	if err != nil {
		f.Violations = append(f.Violations, Violation{Kind: FinalAcquire, Detail: err.Error()})
		return f
	}
	defer locker.Close()

	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, key := range cfg.lockKeys() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*f.Bound)
			defer cancel()
			lock, err := finalTake(ctx, cfg, locker, key)
			f.took(&mu, key, start, lock, err)
		}()
	}
	wg.Wait()
	if cfg.Mode == ModeMulti {
		f.group(locker, cfg.lockKeys())
	}

	f.drain(cfg, client)
	return f
}

// finalTake takes key as the run's loops do: in an rwlock run, the write
// lock of its read/write lock (key is its writer key), which also waits
// for every reader's lease; elsewhere the key with Acquire.
func finalTake(ctx context.Context, cfg Config, locker *setnxlock.Locker, key string) (*setnxlock.Lock, error) {
	if name := cfg.rwLock(); name != "" {
		rw, err := locker.RWLock(name)
		if err != nil {
			return nil, err
		}
		return rw.Lock(ctx)
	}
	return locker.Acquire(ctx, key)
}

// group takes every key of a multi run at once (AcquireMany), once each
// was taken and released alone, within the bound.
func (f *Final) group(locker *setnxlock.Locker, keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*f.Bound)
	defer cancel()
	start := time.Now()
	lock, err := locker.AcquireMany(ctx, keys...)
	f.took(&sync.Mutex{}, groupKey(keys), start, lock, err)
}

// took records what taking key, begun at start, gave: how long it took
// (for a single key, in Acquired), and a violation when it failed or took
// longer than the bound; then it releases the lock, if any. mu guards f.
func (f *Final) took(mu *sync.Mutex, key string, start time.Time, lock *setnxlock.Lock, err error) {
	took := time.Since(start)
	mu.Lock()
	if !isGroup(key) {
		f.Acquired[key] = took
	}
	f.Slowest = max(f.Slowest, took)
	switch {
	case err != nil:
		f.Violations = append(f.Violations, Violation{Kind: FinalAcquire, Key: key,
			Detail: fmt.Sprintf("not acquired within %s after the faults stopped: %v", 2*f.Bound, err)})
	case took > f.Bound:
		f.Violations = append(f.Violations, Violation{Kind: FinalAcquire, Key: key,
			Detail: fmt.Sprintf("acquired %s after the faults stopped, bound %s", took, f.Bound)})
	}
	mu.Unlock()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), f.Bound)
		defer cancel()
		_ = lock.Release(ctx)
	}
}

// drain waits, after the keys were released, until every key's queue of
// waiters is empty, up to f.Bound, and notes how long that took.
func (f *Final) drain(cfg Config, client redis.UniversalClient) {
	released := time.Now()
	for {
		var full []string
		for _, key := range cfg.lockKeys() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			n, err := client.ZCard(ctx, waitersKey(key)).Result()
			cancel()
			if err != nil || n > 0 {
				full = append(full, fmt.Sprintf("%s: %d entries (%v)", waitersKey(key), n, err))
			}
		}
		f.Drained = time.Since(released)
		if len(full) == 0 {
			break
		}
		if f.Drained > f.Bound {
			f.Violations = append(f.Violations, Violation{Kind: QueueNotDrained,
				Detail: fmt.Sprintf("%s after the keys were released: %s", f.Drained.Round(time.Millisecond), strings.Join(full, "; "))})
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitersKey names a key's queue of waiters as the library does
// (keys.go): the key as the hash tag, unless it has one, then ".waiters",
// a sorted set.
func waitersKey(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 && strings.IndexByte(key[open+1:], '}') > 0 {
		return key + ".waiters"
	}
	return "{" + key + "}.waiters"
}

// goroutines compares the harness's goroutines after the run with before,
// giving those still winding down up to bound to end.
func (f *Final) goroutines(before int, bound time.Duration) {
	deadline := time.Now().Add(bound)
	after := runtime.NumGoroutine()
	for after > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		after = runtime.NumGoroutine()
	}
	f.Goroutines = [2]int{before, after}
	if after > before {
		buf := make([]byte, 1<<16)
		buf = buf[:runtime.Stack(buf, true)]
		f.Violations = append(f.Violations, Violation{Kind: GoroutineGrowth,
			Detail: fmt.Sprintf("%d goroutines before the run, %d after every Locker closed; first stacks: %.2000s", before, after, buf)})
	}
}
