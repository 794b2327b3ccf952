package setnxlock

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// criticalSection counts the holders inside it and remembers the largest
// number ever seen at once, which must never exceed one.
type criticalSection struct {
	inside, most, entries atomic.Int64
}

func (c *criticalSection) enter() {
	n := c.inside.Add(1)
	c.entries.Add(1)
	for {
		most := c.most.Load()
		if n <= most || c.most.CompareAndSwap(most, n) {
			break
		}
	}
	runtime.Gosched() // give an intruder the chance to show itself
}

func (c *criticalSection) leave() { c.inside.Add(-1) }

// contend runs workers that share the given Lockers round-robin, each taking
// the lock cycles times with Acquire; crash decides whether a holder
// abandons its lock instead of releasing it.
func contend(t *testing.T, lockers []*Locker, workers, cycles int, crash func() bool) *criticalSection {
	t.Helper()
	var cs criticalSection
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
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
				cs.enter()
				cs.leave()
				if crash() {
					continue // the holder dies: its lease must run out before anyone enters
				}
				if !assert.NoError(t, lock.Release(ctx)) {
					return
				}
			}
		}()
	}
	wg.Wait()
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
		assert.EqualValues(t, workers*cycles, cs.entries.Load())
		assert.EqualValues(t, 1, cs.most.Load(), "two holders were inside the critical section at once")
		assert.Equal(t, "<missing>", b.value(t, "lock.stress"))
	})
}

// Holders crash now and then; the survivors recover their locks by GETSET
// once the lease runs out, and still never overlap.
func TestMutualExclusionWithCrashedHolders(t *testing.T) {
	const workers, lockers, cycles = 16, 4, 40
	onEachBackend(t, func(t *testing.T, b *backend) {
		ls := make([]*Locker, lockers)
		for i := range ls {
			ls[i] = b.locker(t, WithClock(systemClock{}), WithTTL(150*time.Millisecond), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
		}
		var crashes atomic.Int64
		cs := contend(t, ls, workers, cycles, func() bool {
			if rand.IntN(80) == 0 {
				crashes.Add(1)
				return true
			}
			return false
		})
		t.Logf("%d acquisitions, %d crashed holders recovered", cs.entries.Load(), crashes.Load())
		assert.EqualValues(t, workers*cycles, cs.entries.Load())
		assert.EqualValues(t, 1, cs.most.Load(), "two holders were inside the critical section at once")
	})
}

// The check above must be able to fail: with a Locker whose leases are
// already over when written, everyone walks in.
func TestCriticalSectionDetectsOverlap(t *testing.T) {
	b := newBackend(t, "miniredis", startMiniredis(t))
	broken := b.locker(t, WithClock(systemClock{}), WithTTL(time.Millisecond), WithBackoff(MinBackoffFloor, MinBackoffFloor))
	var cs criticalSection
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := broken.Acquire(ctx, "lock.broken")
			require.NoError(t, err)
			cs.enter()
			<-release // hold far past the 1ms lease
			cs.leave()
		}()
	}
	require.Eventually(t, func() bool { return cs.inside.Load() > 1 }, 10*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	assert.Greater(t, cs.most.Load(), int64(1))
}
