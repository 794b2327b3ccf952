package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// npm redis-lock prefixes every lock name with "lock.": the Node side locks
// the name "interop.x", so the Go side locks the key "lock.interop.x".
const nodePrefix = "lock."

// Lease lengths, long against the 1–5 ms critical sections so that only a
// broken lock, never a slow machine, lets two holders in.
const (
	lease      = time.Second // also how long a key stays blocked by a GETSET loser's value
	shortLease = 50 * time.Millisecond
	longLease  = time.Minute // outlasts any of the no-stealing tests
)

// startRedis starts a redis-server for one test and returns a client on it.
func startRedis(t *testing.T) (string, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	return srv.Addr(), client
}

// newLocker is a Locker that writes what npm redis-lock writes: bare Unix
// milliseconds, now + TTL + 1.
func newLocker(t *testing.T, client redis.UniversalClient, ttl time.Duration, opts ...setnxlock.Option) *setnxlock.Locker {
	t.Helper()
	locker, err := setnxlock.New(client, append([]setnxlock.Option{
		setnxlock.WithTTL(ttl),
		setnxlock.WithFormat(setnxlock.UnixMillis),
		// Node retries every few ms; a Go waiter backing off to the default
		// 250ms would lose nearly every contended round.
		setnxlock.WithBackoff(time.Millisecond, 10*time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return locker
}

// millis parses a bare Unix-millisecond lock value.
func millis(t *testing.T, value string) int64 {
	t.Helper()
	ms, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		t.Fatalf("lock value %q is not bare Unix milliseconds: %v", value, err)
	}
	return ms
}

// nodeStats is contender.js's closing line.
type nodeStats struct {
	Who          string
	Acquired     int // critical sections entered
	Abandoned    int // leases taken and never released
	SetnxWon     int
	SetnxRefused int
	Getset       int // GETSETs sent: takeovers won plus lost
}

// goStats counts one side's lock cycles in Go.
type goStats struct {
	acquired    atomic.Int64 // critical sections entered
	abandoned   atomic.Int64 // leases taken and never released
	viaSetnx    atomic.Int64 // acquisitions of a free key
	recovered   atomic.Int64 // watched GETSET takeovers of an expired lease
	overwritten atomic.Int64 // Release: ErrNotHeld with our lease still live, our value gone
	expired     atomic.Int64 // Release: ErrNotHeld because we stalled past our lease
}

// Both sides hammer the same keys: several Node processes running npm
// redis-lock and several Go Lockers, a loop per key each, 1–5 ms critical
// sections reported to the detector. Every tenth round a holder "crashes"
// right after acquiring (a short lease, never released), so the others
// must take an expired lock over with GETSET while the rest still contend:
// redis-lock's bare GETSET against our watched one. No two holders may ever
// be inside the same key's critical section, and both sides must get in
// many times.
func TestNodeAndGoContendWithoutEverSharingALock(t *testing.T) {
	node(t)
	addr, _ := startRedis(t)
	det := newDetector(t)
	const (
		nodeProcs    = 3
		goLockers    = 3
		rounds       = 20
		abandonEvery = 10
	)
	names := []string{"interop.a", "interop.b", "interop.c"}
	entersPerLoop := rounds - rounds/abandonEvery

	var procs []*nodeProc
	for i := range nodeProcs {
		procs = append(procs, startNode(t, "contender.js", map[string]any{
			"redis": addr, "detector": det.Addr(), "who": fmt.Sprintf("node%d", i+1),
			"names": names, "rounds": rounds, "timeout": lease.Milliseconds(),
			"abandonEvery": abandonEvery, "abandonTimeout": shortLease.Milliseconds(),
			"holdMin": 1, "holdMax": 5, "retryDelay": 5,
		}))
	}

	var stats goStats
	observe := setnxlock.WithObserver(setnxlock.ObserverFunc(func(e setnxlock.Event) {
		switch e.Kind {
		case setnxlock.EventAcquired:
			stats.viaSetnx.Add(1)
		case setnxlock.EventRecovered:
			stats.recovered.Add(1)
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a hang, not a measurement
	defer cancel()
	var wg sync.WaitGroup
	for i := range goLockers {
		client := redis.NewClient(&redis.Options{Addr: addr})
		defer client.Close()
		locker := newLocker(t, client, lease, observe)
		crasher := newLocker(t, client, shortLease, observe)
		for _, name := range names {
			dc := dialDetector(t, det.Addr(), fmt.Sprintf("go%d/%s", i+1, name))
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := goContender(ctx, locker, crasher, dc, nodePrefix+name, rounds, abandonEvery, &stats); err != nil {
					t.Error(err)
					cancel() // let the other loops stop too
				}
			}()
		}
	}
	await.Group(t, &wg, "the Go contenders")

	nodeTotal := nodeStats{}
	for _, p := range procs {
		out := p.wait(60 * time.Second)
		var s nodeStats
		if len(out) != 1 || json.Unmarshal([]byte(out[0]), &s) != nil {
			t.Fatalf("contender.js printed %q, want one JSON line", out)
		}
		nodeTotal.Acquired += s.Acquired
		nodeTotal.Abandoned += s.Abandoned
		nodeTotal.SetnxWon += s.SetnxWon
		nodeTotal.SetnxRefused += s.SetnxRefused
		nodeTotal.Getset += s.Getset
	}
	enters, problems := det.report()
	for _, p := range problems {
		t.Error(p)
	}

	nodeTakeovers := nodeTotal.Acquired + nodeTotal.Abandoned - nodeTotal.SetnxWon
	t.Logf("node: %d critical sections, %d abandoned leases, %d SETNX wins, %d GETSET takeovers, %d GETSETs lost (each left its own value at the key, over the winner's or on a key already released), %d refused SETNXs",
		nodeTotal.Acquired, nodeTotal.Abandoned, nodeTotal.SetnxWon, nodeTakeovers, nodeTotal.Getset-nodeTakeovers, nodeTotal.SetnxRefused)
	t.Logf("go:   %d critical sections, %d abandoned leases, %d SETNX wins, %d watched GETSET takeovers, %d Releases with ErrNotHeld while our lease was live (a Node GETSET loser had overwritten our value), %d after it expired",
		stats.acquired.Load(), stats.abandoned.Load(), stats.viaSetnx.Load(), stats.recovered.Load(), stats.overwritten.Load(), stats.expired.Load())
	t.Logf("detector: %v enters, %d overlaps", enters, len(problems))

	// The abandoned leases made both sides take expired locks over.
	if nodeTakeovers == 0 || stats.recovered.Load() == 0 {
		t.Errorf("takeovers of expired leases: node %d, go %d; want some on each side", nodeTakeovers, stats.recovered.Load())
	}

	// Every loop finished its rounds, and the detector saw each side's
	// every critical section.
	wantEach := nodeProcs * len(names) * entersPerLoop
	if nodeTotal.Acquired != wantEach || enters["node"] != wantEach {
		t.Errorf("node critical sections: reported %d, detector saw %d, want %d", nodeTotal.Acquired, enters["node"], wantEach)
	}
	wantEach = goLockers * len(names) * entersPerLoop
	if int(stats.acquired.Load()) != wantEach || enters["go"] != wantEach {
		t.Errorf("go critical sections: counted %d, detector saw %d, want %d", stats.acquired.Load(), enters["go"], wantEach)
	}
}

// goContender is one Go loop of the contention test: rounds lock cycles
// on key, every abandonEvery-th of them a crash right after acquiring.
func goContender(ctx context.Context, locker, crasher *setnxlock.Locker, dc *detectorClient, key string, rounds, abandonEvery int, stats *goStats) error {
	for round := 1; round <= rounds; round++ {
		if round%abandonEvery == 0 {
			if _, err := crasher.Acquire(ctx, key); err != nil {
				return fmt.Errorf("%s: abandoned round %d: %w", dc.who, round, err)
			}
			stats.abandoned.Add(1)
			continue
		}
		lock, err := locker.Acquire(ctx, key)
		if err != nil {
			return fmt.Errorf("%s: round %d: %w", dc.who, round, err)
		}
		if err := dc.tell("enter", key); err != nil {
			return err
		}
		stats.acquired.Add(1)
		time.Sleep(time.Millisecond + rand.N(5*time.Millisecond))
		if err := dc.tell("leave", key); err != nil {
			return err
		}
		switch err := lock.Release(ctx); {
		case errors.Is(err, setnxlock.ErrNotHeld) && time.Now().Before(lock.ExpiresAt()):
			// Expected with redis-lock: a Node client that lost a GETSET race
			// for this lease overwrote our value with its own. It is not a
			// successful release, and the key now holds the loser's value
			// until it expires.
			stats.overwritten.Add(1)
		case errors.Is(err, setnxlock.ErrNotHeld):
			// We stalled past our lease (a very slow machine); if anyone
			// took the lock over meanwhile, the detector has the overlap.
			stats.expired.Add(1)
		case err != nil:
			return fmt.Errorf("%s: release round %d: %w", dc.who, round, err)
		}
	}
	return nil
}

// A Node process holding the lock is killed with SIGKILL: it never
// releases. A Go Locker waiting on the key takes it over with GETSET once,
// and only once, the lease redis-lock wrote (Date.now() + timeout + 1) has
// ended.
func TestGoRecoversTheLockOfAKilledNodeHolderAfterItsLease(t *testing.T) {
	node(t)
	addr, client := startRedis(t)
	const name = "interop.crash"
	holder := startNode(t, "holder.js", map[string]any{"redis": addr, "name": name, "timeout": lease.Milliseconds(), "retryDelay": 5})
	nodeValue, _ := acquiredLine(t, holder)
	holder.kill()

	var recovered, contended atomic.Int64
	locker := newLocker(t, client, lease, setnxlock.WithObserver(setnxlock.ObserverFunc(func(e setnxlock.Event) {
		switch e.Kind {
		case setnxlock.EventRecovered:
			recovered.Add(1)
		case setnxlock.EventContended:
			contended.Add(1)
		}
	})))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang, not a measurement
	defer cancel()
	lock, err := locker.Acquire(ctx, nodePrefix+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node lease ended at %d; go refused %d times, then took over a lease starting at %d",
		nodeValue, contended.Load(), leaseStart(lock.ExpiresAt(), lease))

	if recovered.Load() != 1 {
		t.Errorf("go acquired %d times by GETSET takeover, want 1 (the key still held the dead holder's value)", recovered.Load())
	}
	if start := leaseStart(lock.ExpiresAt(), lease); start < nodeValue {
		t.Errorf("go's lease starts at %d, before the node lease ended at %d: a live lock was stolen", start, nodeValue)
	}
	if got := getValue(t, client, nodePrefix+name); got != strconv.FormatInt(lock.ExpiresAt().UnixMilli(), 10) {
		t.Errorf("the key holds %q after the takeover, want our value %d", got, lock.ExpiresAt().UnixMilli())
	}
	if err := lock.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
}

// A Go holder in its own process is killed with SIGKILL mid-lease. A Node
// redis-lock contender, already polling while the holder was alive, gets
// the lock once, and only once, the Go lease has ended: by GETSET on the
// dead holder's value (or, had the poll been late, by SETNX after the
// Go holder's safety-net expiry removed the key).
func TestNodeRecoversTheLockOfAKilledGoHolderAfterItsLease(t *testing.T) {
	node(t)
	addr, client := startRedis(t)
	const name = "interop.crash"
	holder, goValue := startGoHolder(t, addr, nodePrefix+name, lease)
	goExpiry := millis(t, goValue)
	contender := startNode(t, "holder.js", map[string]any{"redis": addr, "name": name, "timeout": lease.Milliseconds(), "retryDelay": 5})
	holder.kill()

	nodeValue, before := acquiredLine(t, contender)
	refused, how := 0, ""
	for _, line := range before {
		switch {
		case line == "setnx 0":
			refused++
		case line == "setnx 1" || strings.HasPrefix(line, "getset "):
			how = line
		}
	}
	t.Logf("go lease ended at %d; node refused %d times, then got in with %q, its lease starting at %d",
		goExpiry, refused, how, leaseStart(time.UnixMilli(nodeValue), lease))

	if how != "getset "+goValue && how != "setnx 1" {
		t.Errorf("node got in after %q, want a GETSET that returned the dead holder's value %s (or a SETNX after its key expired)", how, goValue)
	}
	if start := leaseStart(time.UnixMilli(nodeValue), lease); start < goExpiry {
		t.Errorf("node's lease starts at %d, before the go lease ended at %d: a live lock was stolen", start, goExpiry)
	}
	contender.send("release")
	contender.waitFor("released", 10*time.Second)
	if n, err := client.Exists(context.Background(), nodePrefix+name).Result(); err != nil || n != 0 {
		t.Errorf("after node released: EXISTS = %d, %v; want the key gone", n, err)
	}
}

// While a Node process holds a long lease, neither TryAcquire nor a
// blocking Acquire gets in, and the key keeps the holder's value; once the
// holder releases, Go gets the free key with SETNX.
func TestGoNeverTakesALiveNodeLease(t *testing.T) {
	node(t)
	addr, client := startRedis(t)
	const name = "interop.live"
	key := nodePrefix + name
	holder := startNode(t, "holder.js", map[string]any{"redis": addr, "name": name, "timeout": longLease.Milliseconds(), "retryDelay": 5})
	nodeValue, _ := acquiredLine(t, holder)
	locker := newLocker(t, client, lease)
	ctx := context.Background()

	for range 20 {
		if _, err := locker.TryAcquire(ctx, key); !errors.Is(err, setnxlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire on a live node lease: %v, want ErrNotAcquired", err)
		}
		if got := getValue(t, client, key); got != strconv.FormatInt(nodeValue, 10) {
			t.Fatalf("the key holds %q after a refused TryAcquire, want node's value %d untouched", got, nodeValue)
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := locker.Acquire(waitCtx, key)
	cancel()
	if !errors.Is(err, setnxlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a live node lease: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if got := getValue(t, client, key); got != strconv.FormatInt(nodeValue, 10) {
		t.Fatalf("the key holds %q after a refused Acquire, want node's value %d untouched", got, nodeValue)
	}

	holder.send("release")
	holder.waitFor("released", 10*time.Second)
	lock, err := locker.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after node released: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
}

// While a Go Locker holds a long lease, a polling Node contender is
// refused by every SETNX and never even tries a GETSET; it gets in, by
// SETNX, only after our Release, which succeeds because the key still held
// exactly our value.
func TestNodeNeverTakesALiveGoLease(t *testing.T) {
	node(t)
	addr, client := startRedis(t)
	const name = "interop.live"
	key := nodePrefix + name
	locker := newLocker(t, client, longLease)
	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	goValue := getValue(t, client, key)

	contender := startNode(t, "holder.js", map[string]any{"redis": addr, "name": name, "timeout": lease.Milliseconds(), "retryDelay": 5})
	for refused := 0; refused < 20; {
		switch line := contender.next(10 * time.Second); line {
		case "setnx 0":
			refused++
		default:
			t.Fatalf("node contender printed %q while our lease was live; want only refused SETNXs", line)
		}
	}
	if got := getValue(t, client, key); got != goValue {
		t.Fatalf("the key holds %q while we hold it, want our value %s", got, goValue)
	}
	releasing := time.Now().UnixMilli()
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("release: %v (the key no longer held our value: node got in)", err)
	}

	nodeValue, before := acquiredLine(t, contender)
	if last := before[len(before)-1]; last != "setnx 1" {
		t.Errorf("node got in after %q, want a SETNX on the key our Release deleted", last)
	}
	if start := leaseStart(time.UnixMilli(nodeValue), lease); start < releasing {
		t.Errorf("node's lease starts at %d, before our Release began at %d", start, releasing)
	}
	contender.send("release")
	contender.waitFor("released", 10*time.Second)
}

// acquiredLine waits for holder.js's "acquired <value> <Date.now()>" and
// returns the value, as Unix ms, and the reply lines printed before it.
func acquiredLine(t *testing.T, p *nodeProc) (int64, []string) {
	t.Helper()
	line, before := p.waitFor("acquired ", 10*time.Second)
	f := strings.Fields(line)
	if len(f) != 3 {
		t.Fatalf("holder.js printed %q", line)
	}
	return millis(t, f[1]), before
}

// leaseStart is when, in Unix ms, a bare-millisecond lease of length ttl
// ending at expiry was computed: both redis-lock and setnxlock write
// now + ttl + 1 ms, and both compute it after judging the previous lease
// over, so it is the latest instant that judgement can have been made.
func leaseStart(expiry time.Time, ttl time.Duration) int64 {
	return expiry.UnixMilli() - ttl.Milliseconds() - 1
}

func getValue(t *testing.T, client *redis.Client, key string) string {
	t.Helper()
	v, err := client.Get(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}
