package setnxlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/faultproxy"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// liveHolders records the holders inside the critical section with the
// ends of their leases, and every moment two live leases were inside.
type liveHolders struct {
	mu         sync.Mutex
	inside     map[int]time.Time
	violations []string
	entries    int
}

func (h *liveHolders) enter(id int, ends time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for other, otherEnds := range h.inside {
		if otherEnds.After(now) && ends.After(now) {
			h.violations = append(h.violations, fmt.Sprintf("worker %d entered while worker %d's lease ran for %v more", id, other, otherEnds.Sub(now)))
		}
	}
	h.inside[id] = ends
	h.entries++
}

func (h *liveHolders) leave(id int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.inside, id)
}

// An exploratory stress (it passes: no overlap of live leases was found in
// ten runs) of the default (handoff) path through a faulty
// network: delayed requests (reordered past the client's timeout), lost
// replies, cut connections, go-redis's own resends, contexts ending at any
// moment, Locker.Close at random, clocks apart by up to 50ms under a 60ms
// skew margin; queueing Lockers on the scripts, on the commands
// (WithoutScripts) and on the classic commands, and a fencing one.
func TestTheHandoffKeepsMutualExclusionUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("stress")
	}
	server := redistest.Start(t)
	p := faultproxy.Start(t, server.Addr())
	require.NoError(t, p.SetFaults(faultproxy.Faults{Seed: uint64(time.Now().UnixNano()), LatencyRate: 0.03, MaxLatency: 300 * time.Millisecond, LoseRate: 0.01, CutRate: 0.01}))
	var lockers []*Locker
	extra := [][]Option{nil, nil, {WithoutScripts()}, {WithoutScripts()}, {WithClassicCommands()}, {WithFencing()}}
	for i := range extra {
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		offset := time.Duration(i*10-25) * time.Millisecond // within the margin of every pair
		opts := append([]Option{WithClock(offsetClock{offset}), WithSkewMargin(60 * time.Millisecond), WithTTL(time.Second), WithBackoff(time.Millisecond, 20*time.Millisecond)}, extra[i]...)
		l, err := New(c, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		lockers = append(lockers, l)
	}
	holders := &liveHolders{inside: map[int]time.Time{}}
	deadline := time.Now().Add(12 * time.Second)
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				l := lockers[rand.IntN(len(lockers))]
				if rand.IntN(50) == 0 {
					_ = l.Close()
				}
				actx, cancel := context.WithTimeout(context.Background(), time.Duration(20+rand.IntN(1500))*time.Millisecond)
				lock, err := l.Acquire(actx, "lock.stress")
				cancel()
				if err != nil {
					continue
				}
				holders.enter(w, lock.ExpiresAt().Add(-offsetOf(l)))
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				holders.leave(w)
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = lock.Release(rctx)
				cancel()
			}
		}()
	}
	await.Group(t, &wg, "the stress workers")
	t.Logf("%d entries, faults %+v", holders.entries, p.Stats())
	assert.Empty(t, holders.violations)
}

// offsetClock runs offset ahead of the system clock: another machine's
// clock.
type offsetClock struct{ offset time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.offset) }

// offsetOf is how far ahead of real time l's clock runs.
func offsetOf(l *Locker) time.Duration {
	if c, ok := l.cfg.clock.(offsetClock); ok {
		return c.offset
	}
	return 0
}
