package setnxlock

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// The scripted takeover (takeover.lua): the same conditional step as the
// watched transaction, in one round trip.

// tripCounter counts a client's round trips: a command sent alone or a
// pipeline (a MULTI…EXEC included) is one.
type tripCounter struct{ n atomic.Int64 }

func countTrips(c *redis.Client) *tripCounter {
	tc := &tripCounter{}
	c.AddHook(tc)
	return tc
}

func (tc *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (tc *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "client", "auth", "select": // connection setup
		default:
			tc.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (tc *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !isTransactionCheck(cmds) {
			tc.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// Where scripts run, an expired lease is taken over in one round trip
// after the attempt's first step, with the safety net (H6), for an
// unqueued attempt, with and without fencing, and for a queued wait (its
// entry leaves the queue in the same step).
func TestAScriptedTakeoverTakesAnExpiredLeaseInOneRoundTrip(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		for _, fencing := range []bool{false, true} {
			var opts []Option
			if fencing {
				opts = append(opts, WithFencing())
			}
			t.Run("unqueued", func(t *testing.T) {
				crashed, err := b.locker(t, opts...).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				b.clock.Set(crashed.ExpiresAt())
				client := b.client(t)
				l := b.lockerOn(t, client, append(opts, WithExpiryGrace(5*time.Second))...)
				warm(t, l)
				sent, trips := record(client), countTrips(client)

				lock, err := l.TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				firstStep := "" // SET NX PX GET, no script
				if fencing {
					firstStep = "acquire " // the token is drawn with the write
				}
				assert.Equal(t, firstStep+"takeover", sent.scriptsRun())
				assert.Equal(t, int64(2), trips.n.Load(), "the first step, then the takeover: one round trip each")
				assert.Equal(t, lock.value, b.value(t, "lock.k"))
				assert.Equal(t, 15*time.Second, b.raw.PTTL(ctx, "lock.k").Val().Round(time.Second), "lease + grace (H6)")
				if fencing {
					assert.Greater(t, lock.FencingToken(), crashed.FencingToken())
				}
				require.ErrorIs(t, crashed.Release(ctx), ErrNotHeld)
				require.NoError(t, lock.Release(ctx))
			})
			if fencing {
				continue // a Locker with fencing does not queue (handoff.go)
			}
			t.Run("queued", func(t *testing.T) {
				crashed, err := b.locker(t, opts...).TryAcquire(ctx, "lock.q")
				require.NoError(t, err)
				client := b.client(t)
				l := b.lockerOn(t, client, opts...)
				warm(t, l)
				trips := countTrips(client)
				acquired := acquireInBackground(t, l, "lock.q")
				entry := b.queued(t, "lock.q", 1)[0]
				sent := record(client)
				before := trips.n.Load()

				b.clock.Set(crashed.ExpiresAt())
				lock := await.Recv(t, acquired, "the queued waiter's takeover")
				require.NotNil(t, lock)
				assert.Equal(t, entryToken(entry), lock.token, "the takeover wrote the wait's token")
				assert.Empty(t, b.queuedNow("lock.q"), "the entry left the queue with the takeover")
				assert.Contains(t, sent.scriptsRun(), "takeover")
				assert.NotContains(t, sent.names(), "WATCH")
				assert.LessOrEqual(t, trips.n.Load()-before, int64(2), "the queued attempt, then the takeover")
				require.NoError(t, lock.Release(ctx))
			})
		}
	})
}

// H1, H2 with the script: many clients race to take over one expired
// lease, each with takeover.lua; exactly one wins, and the key holds the
// winner's value, untouched by the losers. Mutual exclusion is asserted
// directly: the holders inside the critical section never exceed one.
func TestAScriptedTakeoverRaceHasExactlyOneWinner(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		const racers = 8
		for round := range 5 {
			crashed, err := b.locker(t).TryAcquire(ctx, "lock.race")
			require.NoError(t, err)
			b.clock.Set(crashed.ExpiresAt())
			lockers := make([]*Locker, racers)
			sent := make([]*recorder, racers)
			for i := range lockers {
				client := b.client(t)
				lockers[i], sent[i] = b.lockerOn(t, client), record(client)
				warm(t, lockers[i])
			}
			var inside, most, wins atomic.Int64
			var winner atomic.Pointer[Lock]
			start := make(chan struct{})
			var wg sync.WaitGroup
			for _, l := range lockers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start // bounded: closed below, before the racers are awaited
					lock, err := l.TryAcquire(ctx, "lock.race")
					if err != nil {
						assert.ErrorIs(t, err, ErrNotAcquired)
						return
					}
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					wins.Add(1)
					winner.Store(lock)
					time.Sleep(time.Millisecond)
					inside.Add(-1)
				}()
			}
			close(start)
			await.Group(t, &wg, "the racers")
			require.Equal(t, int64(1), wins.Load(), "round %d: exactly one racer takes the lease over", round)
			assert.Equal(t, int64(1), most.Load(), "round %d: holders at once", round)
			assert.Equal(t, winner.Load().value, b.value(t, "lock.race"), "round %d: the losers wrote nothing", round)
			takeovers := 0
			for _, r := range sent {
				takeovers += strings.Count(r.scriptsRun(), "takeover")
				assert.NotContains(t, r.names(), "WATCH", "round %d: the script, not the watched transaction", round)
			}
			assert.Positive(t, takeovers, "round %d: the winner took over with the script", round)
			require.NoError(t, winner.Load().Release(ctx))
		}
	})
}
