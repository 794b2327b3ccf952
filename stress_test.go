package setnxlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// criticalSection records the critical sections of a test's holders as
// intervals of real time (monotonic readings of one machine) and finds the
// most that ever overlapped, which must never exceed one. A section counts
// only while its holder's lease is live by the holder's own clock, checked
// on entry and on exit: a holder that overran its lease (a loaded machine,
// the race detector, a stall) is H8, not a violation of mutual exclusion,
// and is counted apart.
type criticalSection struct {
	mu       sync.Mutex
	sections [][2]time.Time
	overran  int
	// grants, where a test records them (granted), is what became of each
	// lease its workers were granted, by token: whose a value left behind
	// was (whose).
	grants map[string]string
}

// granted records what became of lock's lease ("held", "released").
func (c *criticalSection) granted(lock *Lock, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.grants == nil {
		c.grants = make(map[string]string)
	}
	c.grants[lock.token] = what
}

// whose says whose lease value was, among the grants recorded.
func (c *criticalSection) whose(value string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if what, ok := c.grants[tokenOf(value)]; ok {
		return "a worker's lease, " + what
	}
	return "not a lease granted to any worker"
}

// hold runs body as a critical section of lock, whose Locker reads clock,
// and reports whether it counted (the lease was live on entry and exit).
func (c *criticalSection) hold(lock *Lock, clock Clock, body func()) bool {
	from, to, live := heldThrough(lock, clock, body)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !live {
		c.overran++
		return false
	}
	c.sections = append(c.sections, [2]time.Time{from, to})
	return true
}

// heldThrough runs body as a critical section of lock, whose Locker reads
// clock: when it began and ended by the system clock, and whether the
// lease was live on entry and exit by the Locker's.
func heldThrough(lock *Lock, clock Clock, body func()) (from, to time.Time, live bool) {
	entered, from := clock.Now(), time.Now()
	body()
	to, exited := time.Now(), clock.Now()
	return from, to, entered.Before(lock.ExpiresAt()) && exited.Before(lock.ExpiresAt())
}

// counted returns how many sections counted, and how many overran.
func (c *criticalSection) counted() (counted, overran int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sections), c.overran
}

// most returns the largest number of counted sections that overlapped.
func (c *criticalSection) most() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range c.sections {
		edges = append(edges, edge{s[0], +1}, edge{s[1], -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an exit before an entry at the same instant
	})
	most, inside := 0, 0
	for _, e := range edges {
		inside += e.delta
		most = max(most, inside)
	}
	return most
}

// contend runs workers that share the given Lockers round-robin, each taking
// the lock cycles times with Acquire; crash decides whether a holder
// abandons its lock instead of releasing it. Every Locker reads the system
// clock.
func contend(t *testing.T, lockers []*Locker, workers, cycles int, crash func() bool) *criticalSection {
	t.Helper()
	var cs criticalSection
	var wg sync.WaitGroup
	// Thousands of handoffs: about 7s on miniredis under the race detector
	// on a quiet machine, far more beside other work. The group's deadline
	// is its context's, sized for the work; a hang still fails by name
	// long before go test's timeout.
	const bound = 90 * time.Second
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for w := range workers {
		l := lockers[w%len(lockers)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cycles {
				lock, err := l.Acquire(ctx, "lock.stress")
				if !assert.NoError(t, err) {
					return
				}
				cs.hold(lock, systemClock{}, runtime.Gosched) // give an intruder the chance to show itself
				if crash() {
					continue // the holder dies: its lease must run out before anyone enters
				}
				err = lock.Release(ctx)
				if errors.Is(err, ErrNotHeld) && expired(lock.ExpiresAt(), time.Now()) {
					continue // it overran its lease: counted apart by hold
				}
				if !assert.NoError(t, err) {
					return
				}
			}
		}()
	}
	await.GroupWithin(t, &wg, bound, "the stress workers")
	counted, overran := cs.counted()
	t.Logf("%d critical sections counted, %d overran their lease (H8: not counted)", counted, overran)
	return &cs
}

func TestMutualExclusionUnderContention(t *testing.T) {
	const workers, lockers, cycles = 16, 4, 150
	onEachBackend(t, func(t *testing.T, b *backend) {
		ls := make([]*Locker, lockers)
		for i := range ls {
			ls[i] = b.locker(t, WithClock(systemClock{}), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
		}
		cs := contend(t, ls, workers, cycles, func() bool { return false })
		counted, overran := cs.counted()
		assert.Equal(t, workers*cycles, counted+overran)
		assert.Equal(t, 1, cs.most(), "two holders were inside the critical section at once")
		assert.Equal(t, "<missing>", b.value(t, "lock.stress"))
	})
}

// Holders crash now and then; the survivors recover their locks by GETSET
// once the lease runs out, and still never overlap.
func TestMutualExclusionWithCrashedHolders(t *testing.T) {
	const workers, lockers, cycles = 16, 4, 40
	onEachBackend(t, func(t *testing.T, b *backend) {
		var crashes atomic.Int64
		cs := contend(t, crashingLockers(t, b, lockers), workers, cycles, crashOneIn(80, &crashes))
		counted, overran := cs.counted()
		t.Logf("%d acquisitions, %d crashed holders recovered", counted+overran, crashes.Load())
		assert.Equal(t, workers*cycles, counted+overran)
		assert.Equal(t, 1, cs.most(), "two holders were inside the critical section at once")
	})
}

// crashingLockers returns n Lockers of b on the system clock, with a short
// TTL for crashed holders' leases to run out soon, and fast backoff.
func crashingLockers(t *testing.T, b *backend, n int) []*Locker {
	ls := make([]*Locker, n)
	for i := range ls {
		ls[i] = b.locker(t, WithClock(systemClock{}), WithTTL(150*time.Millisecond), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
	}
	return ls
}

// crashOneIn is a crash decision for contend: one holder in n, at random,
// abandons its lock; crashes counts them.
func crashOneIn(n int, crashes *atomic.Int64) func() bool {
	return func() bool {
		if rand.IntN(n) == 0 {
			crashes.Add(1)
			return true
		}
		return false
	}
}

// The check above must be able to fail: a Locker whose clock runs a minute
// ahead of the holder's (skew past any margin) takes the holder's live lease
// over, and both are inside, each with a lease live by its own clock.
func TestCriticalSectionDetectsOverlap(t *testing.T) {
	b := newBackend(t, "miniredis", startMiniredis(t))
	holder := b.locker(t, WithClock(systemClock{}))
	ahead := offsetClock{time.Minute}
	taker := b.locker(t, WithClock(ahead))
	var cs criticalSection
	lock, err := holder.TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	require.True(t, cs.hold(lock, systemClock{}, func() {
		taken, err := taker.TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "the fast clock sees the holder's lease as long over")
		require.True(t, cs.hold(taken, ahead, func() {}), "the taker's lease is live by its own clock")
	}), "the holder's lease is live by its own clock")
	assert.Equal(t, 2, cs.most())
}
