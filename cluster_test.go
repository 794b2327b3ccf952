package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// Single-key locks through a go-redis ClusterClient on a real three-master
// Redis Cluster. Starting a cluster takes two seconds (Redis holds a new
// master's state at "fail" that long), so the scenarios share one and each
// starts on empty masters with a ManualClock of its own.
func TestLocksOnARedisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3).Addrs()
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"scripts where the server runs them", nil},
		{"classic commands only", []Option{WithoutScripts()}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			for _, scenario := range clusterScenarios {
				t.Run(scenario.name, func(t *testing.T) { scenario.run(t, newClusterBackend(t, addrs, mode.opts...)) })
			}
		})
	}
}

var clusterScenarios = []struct {
	name string
	run  func(t *testing.T, c *clusterBackend)
}{
	{"a lock is taken and released on the master of its slot", clusterAcquireAndRelease},
	{"a held lock is refused until it is released", clusterHeldLockIsRefused},
	{"an expired lease is taken over atomically on the node of its slot", clusterExpiredLeaseIsTakenOver},
	{"Refresh and auto-refresh keep the lease", clusterRefreshKeepsTheLease},
	{"fencing tokens strictly increase, each drawn atomically with the lock on its node", clusterFencingTokensIncrease},
	{"a fenced key whose counter is in another slot fails with CROSSSLOT and writes nothing", clusterCrossSlotFenceWritesNothing},
	{"locks on many keys are spread over every master", clusterLocksSpreadOverEveryMaster},
	{"at most one holder is ever inside the critical section", clusterMutualExclusion},
	{"an election keeps its lock, term counter and record on the master of its name's slot", clusterElection},
	{"ScanStatus lists the locks of every master", clusterScanStatus},
	{"a semaphore's permits, count and fence counter share one slot", clusterSemaphore},
	{"a group of keys in one slot is locked on its master; keys in different slots are refused, nothing written", clusterGroup},
	{"a read/write lock's keys share one slot; readers share, a writer excludes", clusterRWLock},
}

// clusterBackend is the shared cluster as one scenario sees it.
type clusterBackend struct {
	addrs   []string
	opts    []Option // the mode's, before each Locker's own
	clock   *ManualClock
	raw     *redis.ClusterClient // for arranging and inspecting keys behind the Lockers' backs
	traffic *clusterTraffic      // what the Lockers' clients sent to each node
}

func newClusterBackend(t *testing.T, addrs []string, opts ...Option) *clusterBackend {
	c := &clusterBackend{addrs: addrs, opts: opts, clock: NewManualClock(clockStart()), traffic: &clusterTraffic{}}
	c.raw = redis.NewClusterClient(&redis.ClusterOptions{Addrs: slices.Clone(addrs), MaxRetries: -1})
	t.Cleanup(func() { _ = c.raw.Close() })
	require.NoError(t, c.raw.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.FlushAll(ctx).Err()
	}))
	return c
}

// client returns a ClusterClient of its own, seeded with one node only (it
// must discover the others), whose node clients report to c.traffic.
func (c *clusterBackend) client(t testing.TB) *redis.ClusterClient {
	// go-redis appends the nodes it discovers to Addrs in place: give it a
	// slice of its own, or clients that share a backing array race.
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{c.addrs[0]}, MaxRetries: -1})
	client.OnNewNode(func(node *redis.Client) { node.AddHook(c.traffic.hookFor(node.Options().Addr)) })
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// locker returns a Locker on a new ClusterClient with the scenario's
// ManualClock, a TTL of 10s, fast backoff and the mode's options; opts
// override these.
func (c *clusterBackend) locker(t testing.TB, opts ...Option) *Locker {
	t.Helper()
	base := append([]Option{WithClock(c.clock), WithTTL(10 * time.Second), WithBackoff(time.Millisecond, 5*time.Millisecond)}, c.opts...)
	l, err := New(c.client(t), append(base, opts...)...)
	require.NoError(t, err)
	return l
}

// onNode returns what key holds on the master that owns its slot, asked
// directly, and that master's address.
func (c *clusterBackend) onNode(t testing.TB, key string) (value, node string) {
	t.Helper()
	master, err := c.raw.MasterForKey(ctx, key)
	require.NoError(t, err)
	v, err := master.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		v = "<missing>"
	} else {
		require.NoError(t, err)
	}
	return v, master.Options().Addr
}

// slot asks the cluster which slot key hashes to.
func (c *clusterBackend) slot(t testing.TB, key string) int64 {
	t.Helper()
	slot, err := c.raw.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	return slot
}

// clusterTraffic records what the node clients send, as units that run
// on one node: a transaction (MULTI ... EXEC), a script, or a command. The
// client's own traffic (CLUSTER SLOTS, COMMAND, connection setup) is left
// out.
type clusterTraffic struct {
	mu    sync.Mutex
	units []sentUnit
}

type sentUnit struct {
	node     string
	commands []string // upper case: "MULTI", "SETNX", "INCR", "EXEC"
	args     []string // every argument of every command, keys among them
}

// atomic reports whether the server runs the unit as one: a transaction
// or a script.
func (u sentUnit) atomic() bool {
	return u.commands[0] == "MULTI" || u.commands[0] == "EVALSHA" || u.commands[0] == "EVAL"
}

func (u sentUnit) mentions(key string) bool { return slices.Contains(u.args, key) }

func (u sentUnit) String() string { return u.node + ": " + strings.Join(u.commands, " ") }

func (tr *clusterTraffic) reset() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.units = nil
}

func (tr *clusterTraffic) hookFor(node string) redis.Hook { return trafficHook{tr, node} }

func (tr *clusterTraffic) add(node string, cmds []redis.Cmder) {
	unit := sentUnit{node: node}
	for _, cmd := range cmds {
		switch cmd.Name() {
		case "cluster", "command", "hello", "client", "auth", "ping":
			continue
		}
		unit.commands = append(unit.commands, strings.ToUpper(cmd.Name()))
		for _, arg := range cmd.Args()[1:] {
			unit.args = append(unit.args, fmt.Sprint(arg))
		}
	}
	if len(unit.commands) == 0 {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.units = append(tr.units, unit)
}

// sent returns the units that mention key.
func (tr *clusterTraffic) sent(key string) []sentUnit {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var found []sentUnit
	for _, u := range tr.units {
		if u.mentions(key) {
			found = append(found, u)
		}
	}
	return found
}

// nodesUsed returns how many nodes received commands.
func (tr *clusterTraffic) nodesUsed() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	nodes := map[string]bool{}
	for _, u := range tr.units {
		nodes[u.node] = true
	}
	return len(nodes)
}

// allOn asserts that every unit that mentions key went to node.
func (tr *clusterTraffic) allOn(t testing.TB, key, node string) {
	t.Helper()
	sent := tr.sent(key)
	require.NotEmpty(t, sent, "nothing was sent about %q", key)
	for _, u := range sent {
		assert.Equal(t, node, u.node, "%q went to a node that does not own its slot: %v", key, u)
	}
}

type trafficHook struct {
	tr   *clusterTraffic
	node string
}

func (h trafficHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h trafficHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.tr.add(h.node, []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h trafficHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.tr.add(h.node, cmds)
		return next(ctx, cmds)
	}
}

func clusterAcquireAndRelease(t *testing.T, c *clusterBackend) {
	lock, err := c.locker(t).TryAcquire(ctx, "lock.report")
	require.NoError(t, err)
	value, node := c.onNode(t, "lock.report")
	assert.Equal(t, formatValue(lock.ExpiresAt(), lock.token, DefaultIdentity()), value, "the value sits on the master of the key's slot")
	ttl, err := c.raw.PTTL(ctx, "lock.report").Result()
	require.NoError(t, err)
	assert.Positive(t, ttl, "the safety net's PEXPIRE reached the same node (H6)")

	require.NoError(t, lock.Release(ctx))
	value, _ = c.onNode(t, "lock.report")
	assert.Equal(t, "<missing>", value)
	c.traffic.allOn(t, "lock.report", node)
}

func clusterHeldLockIsRefused(t *testing.T, c *clusterBackend) {
	holder, err := c.locker(t).TryAcquire(ctx, "lock.report")
	require.NoError(t, err)
	other := c.locker(t)

	_, err = other.TryAcquire(ctx, "lock.report")
	require.ErrorIs(t, err, ErrNotAcquired)
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = other.Acquire(waitCtx, "lock.report")
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	require.NoError(t, holder.Release(ctx))
	next, err := other.TryAcquire(ctx, "lock.report")
	require.NoError(t, err)
	require.NoError(t, next.Release(ctx))
}

func clusterExpiredLeaseIsTakenOver(t *testing.T, c *clusterBackend) {
	crashed, err := c.locker(t).TryAcquire(ctx, "lock.report")
	require.NoError(t, err)
	c.clock.Set(crashed.ExpiresAt().Add(-time.Millisecond))
	_, err = c.locker(t).TryAcquire(ctx, "lock.report")
	require.ErrorIs(t, err, ErrNotAcquired, "a millisecond before its end the lease is still live")

	c.clock.Set(crashed.ExpiresAt())
	c.traffic.reset()
	taker, err := c.locker(t).TryAcquire(ctx, "lock.report")
	require.NoError(t, err)
	value, node := c.onNode(t, "lock.report")
	assert.Equal(t, formatValue(taker.ExpiresAt(), taker.token, DefaultIdentity()), value)
	c.traffic.allOn(t, "lock.report", node)
	assert.True(t, slices.ContainsFunc(c.traffic.sent("lock.report"), func(u sentUnit) bool {
		return u.atomic() && slices.Contains(u.args, value) // the write of the taker's value
	}), "the takeover's write was not a transaction or a script: %v", c.traffic.sent("lock.report"))

	require.ErrorIs(t, crashed.Release(ctx), ErrNotHeld, "the crashed holder's late release")
	value, _ = c.onNode(t, "lock.report")
	assert.Equal(t, formatValue(taker.ExpiresAt(), taker.token, DefaultIdentity()), value, "and it left the taker's value alone")
	require.NoError(t, taker.Release(ctx))
}

func clusterRefreshKeepsTheLease(t *testing.T, c *clusterBackend) {
	defer noLockGoroutineLeft(t)
	lock, err := c.locker(t).TryAcquire(ctx, "lock.refreshed")
	require.NoError(t, err)
	c.clock.Advance(9 * time.Second)
	require.NoError(t, lock.Refresh(ctx, 10*time.Second))
	assert.Equal(t, c.clock.Now().Add(10*time.Second), lock.ExpiresAt())
	value, _ := c.onNode(t, "lock.refreshed")
	assert.Equal(t, formatValue(lock.ExpiresAt(), lock.token, DefaultIdentity()), value)
	require.NoError(t, lock.Release(ctx))

	renewed, err := c.locker(t, WithTTL(9*time.Second), WithAutoRefresh()).TryAcquire(ctx, "lock.renewed")
	require.NoError(t, err)
	other := c.locker(t)
	for range 4 { // 12s of manual time, more than a lease
		c.clock.Advance(3 * time.Second)
		want := c.clock.Now().Add(9 * time.Second)
		eventually(t, "renewed every TTL/3", func() bool { return renewed.ExpiresAt().Equal(want) })
		_, err := other.TryAcquire(ctx, "lock.renewed")
		require.ErrorIs(t, err, ErrNotAcquired)
	}
	value, _ = c.onNode(t, "lock.renewed")
	assert.Equal(t, formatValue(renewed.ExpiresAt(), renewed.token, DefaultIdentity()), value)
	require.NoError(t, renewed.Release(ctx))
	assert.NoError(t, renewed.Err())
}

func clusterFencingTokensIncrease(t *testing.T, c *clusterBackend) {
	for _, key := range []string{"lock.report", "{user42}.lock"} {
		fenced := func() *Locker { return c.locker(t, WithFencing()) }
		require.Equal(t, c.slot(t, key), c.slot(t, FenceKey(key)), "the server puts %q and its counter in one slot", key)

		first, err := fenced().TryAcquire(ctx, key)
		require.NoError(t, err)
		require.NoError(t, first.Release(ctx))
		crashed, err := fenced().TryAcquire(ctx, key)
		require.NoError(t, err)
		c.clock.Set(crashed.ExpiresAt())
		recovered, err := fenced().TryAcquire(ctx, key)
		require.NoError(t, err)
		require.NoError(t, recovered.Release(ctx))

		assert.Less(t, first.FencingToken(), crashed.FencingToken(), key)
		assert.Less(t, crashed.FencingToken(), recovered.FencingToken(), "%s: a takeover draws a higher token", key)
		counter, node := c.onNode(t, FenceKey(key))
		assert.Equal(t, strconv.FormatInt(recovered.FencingToken(), 10), counter, key)
		_, lockNode := c.onNode(t, key)
		assert.Equal(t, lockNode, node, "%s: the counter lives on the lock's node", key)
	}
	// Each token was drawn in the very transaction or script that won (or
	// tried to win) the lock, on the lock's node: an INCR on its own would
	// not be atomic with the win.
	for _, key := range []string{"lock.report", "{user42}.lock"} {
		_, node := c.onNode(t, key)
		draws := c.traffic.sent(FenceKey(key))
		assert.GreaterOrEqual(t, len(draws), 4, "%s: one draw per acquisition", key)
		for _, u := range draws {
			assert.True(t, u.atomic() && u.mentions(key), "%s: a token drawn outside the lock's own transaction: %v", key, u)
			assert.Equal(t, node, u.node, key)
		}
	}
}

// FenceKey documents the limit: a '}' outside a hash tag cannot be wrapped
// into one, so the counter lands in another slot and the transaction that
// would draw the token atomically with the win cannot run.
func clusterCrossSlotFenceWritesNothing(t *testing.T, c *clusterBackend) {
	const key = "odd}key"
	require.NotEqual(t, c.slot(t, key), c.slot(t, FenceKey(key)))
	_, err := c.locker(t, WithFencing()).TryAcquire(ctx, key)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CROSSSLOT")
	value, _ := c.onNode(t, key)
	assert.Equal(t, "<missing>", value)
	counter, _ := c.onNode(t, FenceKey(key))
	assert.Equal(t, "<missing>", counter)

	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = c.locker(t, WithFencing()).Acquire(waitCtx, key)
	require.Error(t, err)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "Acquire gives up at once: retrying cannot help")
}

func clusterLocksSpreadOverEveryMaster(t *testing.T, c *clusterBackend) {
	const keys = 48
	l := c.locker(t, WithFencing())
	locks := make([]*Lock, keys)
	perNode := map[string]int{}
	for i := range locks {
		key := fmt.Sprintf("lock.job.%d", i)
		lock, err := l.TryAcquire(ctx, key)
		require.NoError(t, err)
		locks[i] = lock
		value, node := c.onNode(t, key)
		require.Equal(t, formatValue(lock.ExpiresAt(), lock.token, DefaultIdentity()), value, key)
		perNode[node]++
	}
	assert.Len(t, perNode, len(c.addrs), "48 keys should land on every master: %v", perNode)
	assert.Equal(t, len(c.addrs), c.traffic.nodesUsed(), "the Locker talked to every master")
	for _, lock := range locks {
		require.NoError(t, lock.Release(ctx))
	}
	var left atomic.Int64
	require.NoError(t, c.raw.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, "lock.job.*").Result()
		left.Add(int64(len(keys)))
		return err
	}))
	assert.Zero(t, left.Load(), "every release deleted its key on its own node")
}

func clusterMutualExclusion(t *testing.T, c *clusterBackend) {
	const workers, lockers, cycles = 8, 4, 30
	ls := make([]*Locker, lockers)
	for i := range ls {
		ls[i] = c.locker(t, WithClock(systemClock{}), WithTTL(100*time.Millisecond), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
	}
	var acquisitions atomic.Int64
	cs := contend(t, ls, workers, cycles, func() bool {
		return acquisitions.Add(1)%60 == 0 // now and then a holder crashes; its lease must run out first
	})
	counted, overran := cs.counted()
	assert.Equal(t, workers*cycles, counted+overran)
	assert.Equal(t, 1, cs.most(), "two holders were inside the critical section at once")
}

func clusterElection(t *testing.T, c *clusterBackend) {
	alice, bob := c.locker(t), c.locker(t)
	first, err := alice.Campaign(ctx, "jobs", "alice")
	require.NoError(t, err)
	leader, err := bob.Leader(ctx, "jobs")
	require.NoError(t, err)
	assert.Equal(t, "alice", leader.Value)
	assert.Equal(t, first.Term(), leader.Term)
	_, node := c.onNode(t, ElectionKey("jobs"))

	won := make(chan *Leadership, 1)
	go func() {
		lead, err := bob.Campaign(await.Context(t), "jobs", "bob")
		assert.NoError(t, err)
		won <- lead
	}()
	require.NoError(t, first.Resign(ctx))
	second := await.Recv(t, won, "bob to lead once alice resigned")
	require.NotNil(t, second)
	assert.Greater(t, second.Term(), first.Term())
	leader, err = alice.Leader(ctx, "jobs")
	require.NoError(t, err)
	assert.Equal(t, "bob", leader.Value)
	require.NoError(t, second.Resign(ctx))
	_, err = alice.Leader(ctx, "jobs")
	assert.ErrorIs(t, err, ErrNoLeader)
	c.traffic.allOn(t, ElectionKey("jobs"), node)
	c.traffic.allOn(t, LeaderKey("jobs"), node)
}

// ScanStatus scans every master: locks on keys of many slots are all
// listed, their queues and fence counters left out.
func clusterScanStatus(t *testing.T, c *clusterBackend) {
	l := c.locker(t, WithFencing())
	var want []string
	for i := range 12 {
		key := "lock.scan" + strconv.Itoa(i)
		_, err := l.TryAcquire(ctx, key)
		require.NoError(t, err)
		want = append(want, key)
	}
	slices.Sort(want)
	nodes := map[string]bool{}
	for _, key := range want {
		_, node := c.onNode(t, key)
		nodes[node] = true
	}
	require.Len(t, nodes, 3, "the keys are spread over every master")
	statuses, err := c.locker(t).ScanStatus(ctx, "*")
	require.NoError(t, err)
	var keys []string
	for _, s := range statuses {
		keys = append(keys, s.Key)
		assert.True(t, s.Held, s.Key)
		assert.Equal(t, DefaultIdentity(), s.Identity, s.Key)
	}
	assert.Equal(t, want, keys)
}

func clusterSemaphore(t *testing.T, c *clusterBackend) {
	for _, name := range []string{"gpu", "{tenant}.gpu"} {
		slot := c.slot(t, PermitsKey(name))
		for _, key := range []string{PermitKey(name, 0), PermitKey(name, 1), FenceKey(PermitsKey(name))} {
			require.Equal(t, slot, c.slot(t, key), "%s: %s is in the count's slot", name, key)
		}
		sem := func() *Semaphore { return semaphoreOf(t, c.locker(t, WithFencing()), name, 2) }
		first, err := sem().TryAcquire(ctx)
		require.NoError(t, err)
		second, err := sem().Acquire(ctx)
		require.NoError(t, err)
		_, err = sem().TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotAcquired, "%s: both permits are held", name)
		assert.Less(t, first.FencingToken(), second.FencingToken(), "%s: one counter for both permits", name)

		waiter := sem()
		got := make(chan *Lock, 1)
		go func() {
			lock, err := waiter.Acquire(await.Context(t))
			assert.NoError(t, err)
			got <- lock
		}()
		status, err := sem().Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, status.Permits, name)
		assert.Len(t, status.Holders, 2, name)
		require.NoError(t, first.Release(ctx))
		third := await.Recv(t, got, "%s: the waiter's permit", name)
		require.NotNil(t, third)
		assert.Equal(t, first.Key(), third.Key(), name)
		assert.Less(t, second.FencingToken(), third.FencingToken(), name)
		require.NoError(t, third.Release(ctx))
		require.NoError(t, second.Release(ctx))
	}
}

func clusterRWLock(t *testing.T, c *clusterBackend) {
	for _, name := range []string{"doc", "{tenant}.doc"} {
		slot := c.slot(t, WriterKey(name))
		for _, key := range []string{ReaderKey(name, "x"), ReadersKey(name), FenceKey(WriterKey(name)), waitersKey(WriterKey(name))} {
			require.Equal(t, slot, c.slot(t, key), "%s: %s is in the writer key's slot", name, key)
		}
		rw := func() *RWLock { return rwOf(t, c.locker(t, WithFencing()), name) }
		first, err := rw().TryRLock(ctx)
		require.NoError(t, err)
		second, err := rw().RLock(ctx)
		require.NoError(t, err, "%s: readers share", name)
		_, err = rw().TryLock(ctx)
		require.ErrorIs(t, err, ErrNotAcquired, "%s: a writer beside readers", name)

		got := takeInBackground(t, rw().Lock, name+": the writer")
		require.NoError(t, first.Release(ctx))
		require.NoError(t, second.Release(ctx))
		writer := await.Recv(t, got, "%s: the writer behind the readers", name)
		require.NotNil(t, writer)
		assert.Greater(t, writer.FencingToken(), second.FencingToken(), name)
		_, err = rw().TryRLock(ctx)
		require.ErrorIs(t, err, ErrNotAcquired, "%s: a reader beside the writer", name)
		require.NoError(t, writer.Release(ctx))
	}
}
