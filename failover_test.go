package setnxlock

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// Locks through a Redis Sentinel failover (H9), on a real deployment: one
// primary, two replicas, three sentinels (internal/redistest). Clients use
// go-redis's failover client, as a service would.

// failoverRoundsEnv sets how many rounds each mode of
// TestWithReplicasALeaseSurvivesAFailover runs. The Sentinel tests take
// about a minute, so they run under `make failover` (which sets it, and
// which CI runs), not in every `make test`.
const failoverRoundsEnv = "SETNXLOCK_FAILOVER_ROUNDS"

// failoverRounds returns the rounds asked for, and skips the test, saying
// where it runs, when none are.
func failoverRounds(t *testing.T) int {
	v := os.Getenv(failoverRoundsEnv)
	if v == "" {
		t.Skip("a Sentinel failover test: `make failover` runs it (CI does), or set " + failoverRoundsEnv)
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, failoverRoundsEnv)
	return n
}

// promotionLimit bounds a failover: down-after (1.5s), the sentinels'
// agreement and election, the promotion; seen at about 3s.
const promotionLimit = 15 * time.Second

// failoverClient is a failover client of the deployment with short
// timeouts, so that a dead primary costs little per attempt.
func failoverClient(t *testing.T, d *redistest.Sentinel) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: d.MasterName(), SentinelAddrs: d.SentinelAddrs(),
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Workers keep acquiring and releasing several keys while the primary is
// killed (SIGKILL), and later stopped (SIGSTOP: its connections stay open
// and silent), and a replica is promoted each time: they resume soon after
// the promotion, on the default path (queue and handoff, whose
// subscriptions and queues were on the old primary), and every worker
// returns once its context ends: nothing of theirs stays stuck on a dead
// connection.
func TestLockersKeepWorkingThroughAFailover(t *testing.T) {
	failoverRounds(t)
	d := redistest.StartSentinel(t, redistest.SentinelConfig{})
	keys := []string{"lock.a", "lock.b", "lock.c"}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var mu sync.Mutex
	var grants []time.Time
	var wg sync.WaitGroup
	for w := range 6 {
		l, err := New(failoverClient(t, d), WithTTL(time.Second))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.Close()
			for i := 0; ctx.Err() == nil; i++ {
				actx, cancel := context.WithTimeout(ctx, 20*time.Second)
				lock, err := l.Acquire(actx, keys[(w+i)%len(keys)])
				cancel()
				if err != nil {
					time.Sleep(10 * time.Millisecond) // the context ended, or an error a retry answers
					continue
				}
				mu.Lock()
				grants = append(grants, time.Now())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				rctx, rcancel := context.WithTimeout(ctx, time.Second)
				_ = lock.Release(rctx)
				rcancel()
			}
		}()
	}
	// gap is the longest stretch without an acquisition from since on.
	gap := func(since time.Time) (from, to time.Time, before, after int) {
		mu.Lock()
		defer mu.Unlock()
		for i, g := range grants {
			if g.Before(since) {
				before++
				continue
			}
			after++
			if i > 0 && g.Sub(grants[i-1]) > to.Sub(from) {
				from, to = grants[i-1], g
			}
		}
		return from, to, before, after
	}
	for _, fault := range []string{"SIGKILL", "SIGSTOP"} {
		time.Sleep(time.Second)
		faultAt := time.Now()
		old := d.PausePrimary
		if fault == "SIGKILL" {
			old = d.KillPrimary
		}
		failed := old()
		_, promotion := d.WaitForPromotion(failed.Addr(), promotionLimit)
		time.Sleep(3 * time.Second)
		promoted := faultAt.Add(promotion)
		from, to, before, after := gap(faultAt)
		require.Positive(t, before, "workers acquired before the %s", fault)
		require.Positive(t, after, "workers acquired after the %s", fault)
		t.Logf("%s of the primary: promotion %v after it; no acquisition from %v to %v after it (%v), the first after it %v after the promotion; %d acquisitions before it, %d after",
			fault, promotion, from.Sub(faultAt), to.Sub(faultAt), to.Sub(from), to.Sub(promoted), before, after)
		// The bound after the promotion: the failover client's next look
		// at the sentinels, a lease the new primary still holds (TTL), a
		// poll.
		assert.LessOrEqual(t, to.Sub(promoted), 3*time.Second, "workers resume within the bound after the promotion (%s)", fault)
		if fault == "SIGKILL" {
			d.Restart(failed)
		} else {
			d.Resume(failed)
		}
	}
	stop()
	await.Group(t, &wg, "every worker to return once its context ended")
}

// grant is one acquisition in a failover round, as the arbiter sees it.
type grant struct {
	who      string
	at, ends time.Time
	token    int64
}

// failoverRound acquires a key while both replicas lag (stopped for the
// moment of the acquisition), kills the primary at once, resumes the
// replicas, and once one is promoted lets a contender try for the key
// while the first lease lasts. It returns every grant of the round.
func failoverRound(t *testing.T, d *redistest.Sentinel, key string, opts ...Option) []grant {
	t.Helper()
	const ttl = 8 * time.Second // far past the promotion and the contender's window
	base := []Option{WithTTL(ttl), WithFencing(), WithBackoff(time.Millisecond, 50*time.Millisecond)}
	holder, err := New(failoverClient(t, d), append(base, opts...)...)
	require.NoError(t, err)
	contender, err := New(failoverClient(t, d), append(base, opts...)...)
	require.NoError(t, err)
	defer holder.Close()
	defer contender.Close()

	var mu sync.Mutex
	var grants []grant
	var locks []*Lock
	granted := func(who string, lock *Lock) {
		mu.Lock()
		defer mu.Unlock()
		grants = append(grants, grant{who: who, at: time.Now(), ends: lock.ExpiresAt(), token: lock.FencingToken()})
		locks = append(locks, lock)
	}

	// Replication lag, made certain: the replicas are stopped and their
	// links cut, so the primary sends them nothing until it dies. (A
	// stopped process alone would still find the stream in its socket's
	// buffer when continued.)
	lagging := d.Replicas()
	for _, r := range lagging {
		require.NoError(t, r.Pause())
	}
	onPrimary := redis.NewClient(&redis.Options{Addr: d.Primary().Addr(), MaxRetries: -1})
	require.NoError(t, onPrimary.ClientKillByFilter(context.Background(), "TYPE", "replica").Err())
	_ = onPrimary.Close()
	holding := make(chan struct{})
	go func() {
		defer close(holding)
		actx, cancel := context.WithTimeout(context.Background(), promotionLimit+5*time.Second)
		defer cancel()
		if lock, err := holder.Acquire(actx, key); err == nil {
			granted("holder", lock)
		}
	}()
	time.Sleep(100 * time.Millisecond) // the holder's attempt reaches the primary, its replicas stopped
	old := d.KillPrimary()
	for _, r := range lagging {
		require.NoError(t, r.Resume())
	}
	d.WaitForPromotion(old.Addr(), promotionLimit)

	// The contender's window: two seconds after the promotion, well
	// inside any lease granted before it.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		tctx, cancel := context.WithTimeout(context.Background(), time.Second)
		lock, err := contender.TryAcquire(tctx, key)
		cancel()
		if err == nil {
			granted("contender", lock)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	await.Recv(t, holding, "the holder's Acquire to return")
	for _, lock := range locks {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = lock.Release(rctx)
		cancel()
	}
	d.Restart(old) // back as a replica of the new primary, for the next round
	slices.SortFunc(grants, func(a, b grant) int { return a.at.Compare(b.at) })
	return grants
}

// overlapping reports two grants of a round whose leases overlap: the
// later granted before the earlier's lease ended.
func overlapping(grants []grant) (grant, grant, bool) {
	for i := 1; i < len(grants); i++ {
		if grants[i].at.Before(grants[i-1].ends) {
			return grants[i-1], grants[i], true
		}
	}
	return grant{}, grant{}, false
}

// With WithReplicas(1, …) no other client takes a key before the lease
// that holds it ends, though the primary that granted it dies at once and
// its replicas lagged; and fencing tokens never go backwards. Without it,
// the same rounds let a second client in: that count is reported, not
// asserted (it is the hazard the option is for).
func TestWithReplicasALeaseSurvivesAFailover(t *testing.T) {
	rounds := failoverRounds(t)
	d := redistest.StartSentinel(t, redistest.SentinelConfig{})
	var tokens []int64
	var safeGrants atomic.Int64
	for round := range rounds {
		grants := failoverRound(t, d, "lock.replicated", WithReplicas(1, 300*time.Millisecond))
		if a, b, bad := overlapping(grants); bad {
			t.Errorf("round %d with WithReplicas: %s was granted %v before %s's lease ended", round, b.who, a.ends.Sub(b.at), a.who)
		}
		for _, g := range grants {
			tokens = append(tokens, g.token)
		}
		safeGrants.Add(int64(len(grants)))
	}
	assert.IsIncreasing(t, tokens, "with WithReplicas, fencing tokens never go backwards across failovers")
	assert.Positive(t, safeGrants.Load(), "someone was granted the key in the rounds with WithReplicas")

	var second int
	var backwards int
	var last int64
	for range rounds {
		grants := failoverRound(t, d, "lock.unreplicated")
		if _, _, bad := overlapping(grants); bad {
			second++
		}
		for _, g := range grants {
			if g.token <= last {
				backwards++
			}
			last = g.token
		}
	}
	t.Logf("with WithReplicas(1, 300ms): %d rounds, no second holder, %d grants, tokens %v", rounds, safeGrants.Load(), tokens)
	t.Logf("without it: a second client got in while the first lease lasted in %d of %d rounds; fencing tokens went backwards %d times",
		second, rounds, backwards)
}
