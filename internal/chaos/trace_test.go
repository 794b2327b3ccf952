package chaos

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/faultproxy"
	"github.com/setnxlock/setnxlock/internal/redisproc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// go-redis retries a command whose reply timed out inside the call a hook
// wraps: a SETNX applied by its first try, its reply lost, is answered 0
// by its retry and looks like a refusal. The trace must count it in
// doubt, or a bare timestamp's writer waiting out its own lease is taken
// for a waiter on a key nobody holds (formats mode, a 988ms "free wait").
func TestAWriteRetriedAfterALostReplyIsInDoubt(t *testing.T) {
	bin, err := redisBinary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs redis-server: %v", err)
		}
		t.Skipf("no redis-server: %v", err)
	}
	server, err := redisproc.Start(redisproc.Config{Bin: bin, Dir: t.TempDir()})
	require.NoError(t, err)
	defer server.Kill()
	const timeout = 50 * time.Millisecond
	for _, c := range []struct {
		hook  traceHook
		doubt bool
	}{{traceHook{}, false}, {traceHook{retried: timeout}, true}} {
		proxy, err := faultproxy.New(server.Addr(), faultproxy.Faults{})
		require.NoError(t, err)
		proxy.LoseReplies(func(command string, nth int) bool { return command == "setnx" && nth == 1 })
		client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: timeout, MaxRetries: 3})
		client.AddHook(c.hook)
		trace := &callTrace{}
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), callKey{}, trace), 5*time.Second)
		created, err := client.Do(ctx, "setnx", "k", "v").Int()
		cancel()
		require.NoError(t, err, "the retry hides the lost reply")
		assert.Zero(t, created, "the retry finds the value its first try wrote")
		assert.Equal(t, c.doubt, trace.doubt.Load(), "retried after %s", c.hook.retried)
		require.NoError(t, client.Del(context.Background(), "k").Err())
		require.NoError(t, client.Close())
		proxy.Close()
	}
}

// The setup of a new connection (HELLO, CLIENT SETINFO), which go-redis
// sends as a pipeline under the context of the call that dialled, is no
// write that can win a lock: it must not move the call's Sent, on which
// the token-order check relies (a fencing history once failed it when a
// wake-up subscription dialled after a SIGSTOP, 545ms after the win).
func TestConnectionSetupIsNotAWriteThatCanWin(t *testing.T) {
	trace := &callTrace{}
	ctx := context.WithValue(context.Background(), callKey{}, trace)
	run := traceHook{}.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
	setup := []redis.Cmder{redis.NewMapStringInterfaceCmd(ctx, "hello", 3), redis.NewStatusCmd(ctx, "client", "setinfo", "LIB-NAME", "go-redis")}
	require.NoError(t, run(ctx, setup))
	assert.Zero(t, trace.sent.Load(), "a connection's setup")
	require.NoError(t, run(ctx, []redis.Cmder{redis.NewStatusCmd(ctx, "multi"), redis.NewIntCmd(ctx, "incr", "k"), redis.NewSliceCmd(ctx, "exec")}))
	assert.NotZero(t, trace.sent.Load(), "a transaction that can win")
}

// A Campaign gives up a lock it won when it cannot publish the record (a
// context that ends while it publishes, OOM, a lease run out), and its
// Resign is best effort: that lease may hold the key to its end, and the
// history must count the call in doubt (a 321ms "free wait" in election
// mode). The trace counts the wins inside one Campaign call by publish's
// read of the record.
func TestACampaignThatGaveUpAWinIsInDoubt(t *testing.T) {
	bin, err := redisBinary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs redis-server: %v", err)
		}
		t.Skipf("no redis-server: %v", err)
	}
	server, err := redisproc.Start(redisproc.Config{Bin: bin, Dir: t.TempDir()})
	require.NoError(t, err)
	defer server.Kill()
	client := redis.NewClient(&redis.Options{Addr: server.Addr()})
	defer client.Close()
	client.AddHook(traceHook{})
	locker, err := setnxlock.New(client, setnxlock.WithTTL(time.Second))
	require.NoError(t, err)
	defer locker.Close()

	campaign := func(name string) (*callTrace, error) {
		trace := &callTrace{}
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), callKey{}, trace), 5*time.Second)
		defer cancel()
		lead, err := locker.Campaign(ctx, name, "v")
		if err == nil {
			require.NoError(t, lead.Resign(context.Background()))
		}
		return trace, err
	}

	trace, err := campaign("won")
	require.NoError(t, err)
	assert.EqualValues(t, 1, trace.wins.Load(), "one win, published")
	assert.False(t, campaignInDoubt(trace, err), "a Campaign that won once and published")

	// The record's key holds something else: publish refuses (H7) after
	// the Acquire won, and the Campaign resigns and fails.
	require.NoError(t, client.Set(context.Background(), setnxlock.LeaderKey("refused"), "not a record", 0).Err())
	trace, err = campaign("refused")
	require.Error(t, err)
	assert.EqualValues(t, 1, trace.wins.Load(), "its Acquire won before publish refused")
	assert.True(t, campaignInDoubt(trace, err), "a Campaign that failed after a win")

	nothing := &callTrace{}
	assert.False(t, campaignInDoubt(nothing, setnxlock.ErrNotAcquired), "a Campaign that never won")
	nothing.wins.Store(2)
	assert.True(t, campaignInDoubt(nothing, nil), "a Campaign that gave a win up before it won again")
}
