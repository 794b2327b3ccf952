package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/redisproc"
)

// The heard mode's faults (claimfaults.go, faultconn.go): what is read off
// the wire, and what a faulted claim does on a real server.

func resp(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

func TestHandoffMessagesAreReadOffTheSubscriptionConnection(t *testing.T) {
	resp2 := resp("message", "setnxlock:handoff:LOCKER", "TOKEN1:chaos.k1")
	withEnd := fmt.Sprintf("TOKEN2:%d.0:chaos.k2", time.Now().Add(handoffClaimWindow).UnixMilli()) // with the provisional end
	resp3 := ">" + strings.TrimPrefix(resp("message", "setnxlock:handoff:LOCKER", withEnd), "*")
	wake := resp("message", "setnxlock:released:chaos.k3", "chaos.k3")
	assert.Equal(t, []string{"TOKEN1", "TOKEN2"}, handoffTokens([]byte(resp2+wake+resp3)))
	assert.Empty(t, handoffTokens([]byte(wake)), "a wake-up names no waiter")
	assert.Empty(t, handoffTokens([]byte(resp("message", "setnxlock:handoff:LOCKER", "TOKEN3::chaos.k3"))),
		"a wake-up on the waiter's own channel (no provisional end) hands nothing")
	assert.Empty(t, handoffTokens([]byte(resp2[:len(resp2)-6])), "a message cut by the chunk's end is not read")
}

func TestClaimsAreRecognisedOnBothPaths(t *testing.T) {
	queued := []string{"evalsha", "abc", "2", "chaos.k1", "{chaos.k1}.waiters", "123:TOKEN|web-1:42", "600", "ID:TOKEN", "TOKEN", "1700000000000000", "123"}
	key, token, ok := claimOf(queued)
	assert.True(t, ok)
	assert.Equal(t, []string{"chaos.k1", "TOKEN"}, []string{key, token}, "the scripted claim")
	claim := []string{"evalsha", "abc", "2", "chaos.k1", "{chaos.k1}.waiters", "123:TOKEN", "600", "ID:TOKEN", "TOKEN", "123"}
	key, token, ok = claimOf(claim)
	assert.True(t, ok)
	assert.Equal(t, []string{"chaos.k1", "TOKEN"}, []string{key, token}, "a claim script's (issue 24's claim.lua)")
	key, token, ok = claimOf([]string{"set", "chaos.k2", "123:TOKEN"})
	assert.True(t, ok)
	assert.Equal(t, []string{"chaos.k2", "TOKEN"}, []string{key, token}, "the command path's watched claim")
	key, token, ok = claimOf([]string{"set", "chaos.k2", "123:TOKEN|web-1:42"})
	assert.True(t, ok)
	assert.Equal(t, []string{"chaos.k2", "TOKEN"}, []string{key, token}, "a watched claim's value with the holder's identity")
	_, _, ok = claimOf(append(claim[:8:8], "OTHER", "123"))
	assert.False(t, ok, "a claim script whose value does not carry the entry's token")
	for _, args := range [][]string{
		{"set", "chaos.k2", "123:TOKEN", "nx", "px", "300"}, // an attempt
		{"setnx", "chaos.k2", "123:TOKEN"},                  // a classic attempt
		{"set", "chaos.k2", "123"},                          // a bare timestamp
		{"zrem", "{chaos.k1}.waiters", "ID:TOKEN"},
	} {
		_, _, ok := claimOf(args)
		assert.False(t, ok, "%v", args)
	}

	pipeline := resp("multi") + resp("set", "chaos.k2", "123:TOKEN") + resp("pexpire", "chaos.k2", "600") + resp("exec")
	c := newClaimFaults(ClaimFaults{DropRate: 1}, 1, "g0.0", func(string, string) {})
	assert.Equal(t, claimFate{}, c.fate([]byte(pipeline)), "no handoff heard: no claim")
	c.heard([]byte(resp("message", "setnxlock:handoff:ID", "TOKEN:chaos.k2")))
	assert.Equal(t, claimFate{kind: FaultClaimDropped, key: "chaos.k2"}, c.fate([]byte(pipeline)), "a claim after the handoff")
	assert.Equal(t, claimFate{}, c.fate([]byte(resp("set", "chaos.k2", "123:OTHER"))), "another token's")

	// One fate per handoff: a claim sent again after a failure meets it again.
	c = newClaimFaults(ClaimFaults{DropRate: 0.5}, 1, "g0.0", func(string, string) {})
	kinds := map[string]map[string]bool{}
	for i := range 20 {
		token := fmt.Sprintf("T%d", i)
		c.heard([]byte(resp("message", "setnxlock:handoff:ID", token+":chaos.k2")))
		kinds[token] = map[string]bool{}
		for range 5 {
			kinds[token][c.fate([]byte(resp("set", "chaos.k2", "123:"+token))).kind] = true
		}
	}
	dropped := 0
	for token, seen := range kinds {
		assert.Len(t, seen, 1, "every claim of %s met the same fate", token)
		if seen[FaultClaimDropped] {
			dropped++
		}
	}
	assert.True(t, dropped > 0 && dropped < 20, "some handoffs' claims dropped, not all: %d", dropped)
}

// claimsOnARealServer is a client of a redis-server whose connections carry
// claim faults with the given rates, a handoff of TOKEN already heard, and
// what the faults reported.
func claimsOnARealServer(t *testing.T, f ClaimFaults) (*redis.Client, *redis.Client, func() []string) {
	t.Helper()
	bin, err := redisBinary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs redis-server: %v", err)
		}
		t.Skipf("no redis-server: %v", err)
	}
	srv, err := redisproc.Start(redisproc.Config{Bin: bin, Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(srv.Kill)
	var mu sync.Mutex
	var reports []string
	c := newClaimFaults(f, 1, "g0.0", func(kind, key string) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, kind+" "+key)
	})
	c.heard([]byte(resp("message", "setnxlock:handoff:ID", "TOKEN:k")))
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: 50 * time.Millisecond, Dialer: claimFaultDialer(c)})
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close(); _ = direct.Close() })
	return client, direct, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), reports...)
	}
}

func TestADelayedClaimLandsAfterItsClientGaveUp(t *testing.T) {
	ctx := context.Background()
	client, direct, reports := claimsOnARealServer(t, ClaimFaults{DelayRate: 1, MaxDelay: 300 * time.Millisecond})
	// The delay is a draw up to MaxDelay: try until one outlasts the read timeout.
	deadline := time.Now().Add(10 * time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "no claim was held past the read timeout")
		require.NoError(t, direct.Del(ctx, "k").Err())
		err := client.Set(ctx, "k", "1:TOKEN", 0).Err()
		var netErr net.Error
		if err != nil && assert.ErrorAs(t, err, &netErr) && netErr.Timeout() {
			break
		}
	}
	// Its client timed out: had the claim landed within the read timeout, the
	// reply would have come back.
	assert.Eventually(t, func() bool { return direct.Get(ctx, "k").Val() == "1:TOKEN" }, 2*time.Second, 5*time.Millisecond,
		"the held claim landed after its client gave up")
	assert.Eventually(t, func() bool { return strings.Contains(strings.Join(reports(), ","), claimInDoubt+" k") }, 2*time.Second, 5*time.Millisecond,
		"a claim landing after its client gave up is reported in doubt")
	require.NoError(t, client.Set(ctx, "other", "x", 0).Err(), "the client goes on, on another connection")
}

func TestADroppedClaimNeverReachesTheServer(t *testing.T) {
	ctx := context.Background()
	client, direct, reports := claimsOnARealServer(t, ClaimFaults{DropRate: 1})
	require.Error(t, client.Set(ctx, "k", "1:TOKEN", 0).Err(), "no reply")
	assert.Never(t, func() bool { return direct.Exists(ctx, "k").Val() == 1 }, 100*time.Millisecond, 10*time.Millisecond)
	assert.Equal(t, []string{FaultClaimDropped + " k"}, reports(), "dropped, not in doubt")
}

func TestALostClaimReplyLeavesTheClaimApplied(t *testing.T) {
	ctx := context.Background()
	client, direct, reports := claimsOnARealServer(t, ClaimFaults{LoseRate: 1})
	require.Error(t, client.Set(ctx, "k", "1:TOKEN", 0).Err(), "no reply")
	assert.Equal(t, "1:TOKEN", direct.Get(ctx, "k").Val(), "applied")
	assert.Equal(t, []string{FaultClaimLost + " k", claimInDoubt + " k"}, reports())
}

func TestAClaimInDoubtMayExplainAWaitAndARecovery(t *testing.T) {
	a := acq("a", 0, 0, 1, 200, 10)
	b := acq("b", 0, 149, 150, 350, 160)
	b.Called = ms(5)
	h := History{Acquisitions: []Acquisition{a, b}, End: ms(1000)}
	b100 := bounds
	b100.FreeWait = 100 * time.Millisecond
	require.Equal(t, 1, Check(h, b100).Count(SlowFreeWait), "b waited 140ms on a free key")
	h.Doubts = []Doubt{{Client: "c", Key: "k", At: ms(20)}} // a claim of c landed unknown to it
	r := Check(h, b100)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 1, r.InDoubtWaits)

	crashed := acq("a", 1, 0, 1, 200, -1)
	crashed.Crashed = ms(50)
	late := acq("b", 2, 190, 300, 500, 310) // 100ms after, bound 50ms
	h = History{Acquisitions: []Acquisition{crashed, late}, End: ms(1000), Doubts: []Doubt{{Client: "c", Key: "k", At: ms(150)}}}
	r = Check(h, bounds)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 1, r.InDoubtRecoveries)
}

func TestAHolderToldOfItsLossHoldsNoLonger(t *testing.T) {
	// a's claim failed: its Lock ended at 60 though its last check, on the
	// way out, still found the provisional lease live.
	a := acq("a", 0, 0, 1, 200, 80)
	a.Told, a.ToldEnd = ms(60), ms(200)
	b := acq("b", 0, 65, 70, 270, 100)
	r := Check(History{Acquisitions: []Acquisition{a, b}, End: ms(1000)}, bounds)
	assert.Zero(t, r.Count(LeaseOverlap), r.Violations)

	a.Told = time.Time{} // not told: it held to its last check
	r = Check(History{Acquisitions: []Acquisition{a, b}, End: ms(1000)}, bounds)
	assert.Equal(t, 1, r.Count(LeaseOverlap), r.Violations)
}
