package redistest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/redisproc"
)

// promotionLimit bounds a failover: down-after (1.5s) + agreement and
// election (about 1-2s) + promotion; seen at about 3-5s.
const promotionLimit = 10 * time.Second

func TestSentinelFailsOverAKilledAndAPausedPrimaryAndStopsWithItsTest(t *testing.T) {
	var addrs []string
	t.Run("fails over", func(t *testing.T) {
		began := time.Now()
		d := StartSentinel(t, SentinelConfig{})
		t.Logf("the deployment was healthy %v after StartSentinel began", time.Since(began))
		for _, s := range append(d.Servers(), d.Sentinels()...) {
			addrs = append(addrs, s.Addr())
		}
		failsOver(t, d)
	})
	require.Len(t, addrs, 6, "three data servers and three sentinels")
	for _, addr := range addrs {
		assert.Error(t, redisproc.Ping(addr), "%s outlived its test", addr)
	}
}

func failsOver(t *testing.T, d *Sentinel) {
	ctx := context.Background()
	require.Len(t, d.Servers(), 3)
	require.Len(t, d.SentinelAddrs(), 3)
	first := d.Primary()
	require.Same(t, d.Servers()[0], first, "the first data server starts as the primary")
	require.ElementsMatch(t, d.Servers()[1:], d.Replicas())

	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    d.MasterName(),
		SentinelAddrs: d.SentinelAddrs(),
		MaxRetries:    -1, // every attempt is the test's, and timed
		DialTimeout:   200 * time.Millisecond,
		ReadTimeout:   300 * time.Millisecond,
		WriteTimeout:  300 * time.Millisecond,
	})
	t.Cleanup(func() { _ = client.Close() })
	require.NoError(t, client.Set(ctx, "before", "v", 0).Err())
	acked, err := client.Do(ctx, "WAIT", 2, 2000).Int()
	require.NoError(t, err)
	require.Equal(t, 2, acked, "both replicas acknowledge the write")
	require.Equal(t, "v", client.Get(ctx, "before").Val())

	// A crash.
	killed := d.KillPrimary()
	wrote := writesAgain(client, "after-kill")
	promoted, took := d.WaitForPromotion(killed.Addr(), promotionLimit)
	w := await.Recv(t, wrote, "the failover client to write again after the kill")
	require.NoError(t, w.err)
	t.Logf("SIGKILL: %s promoted %v after the kill; the failover client wrote again %v after it", promoted.Addr(), took, w.after)
	require.NotSame(t, killed, promoted)
	assert.Equal(t, "v", get(t, promoted, "after-kill"), "the write went to the promoted server")
	assert.Equal(t, "v", client.Get(ctx, "before").Val(), "a write both replicas acknowledged survives the failover")
	assert.Equal(t, "master", roleName(t, promoted), "ROLE on the promoted server")

	began := time.Now()
	d.Restart(killed)
	t.Logf("the restarted old primary rejoined in %v", time.Since(began))
	assert.Equal(t, "slave", roleName(t, killed), "the restarted old primary is a replica")
	assert.Same(t, promoted, d.Primary(), "a restart does not move the primary")
	assert.ElementsMatch(t, without(d.Servers(), promoted), d.Replicas())

	// A stall.
	paused := d.PausePrimary()
	wrote = writesAgain(client, "after-pause")
	promoted, took = d.WaitForPromotion(paused.Addr(), promotionLimit)
	w = await.Recv(t, wrote, "the failover client to write again after the pause")
	require.NoError(t, w.err)
	t.Logf("SIGSTOP: %s promoted %v after the pause; the failover client wrote again %v after it", promoted.Addr(), took, w.after)
	require.NotSame(t, paused, promoted)
	assert.Equal(t, "v", get(t, promoted, "after-pause"), "the write went to the promoted server")

	began = time.Now()
	d.Resume(paused)
	t.Logf("the resumed old primary rejoined in %v", time.Since(began))
	assert.Equal(t, "slave", roleName(t, paused), "the resumed old primary is a replica")
	for _, key := range []string{"before", "after-kill", "after-pause"} {
		assert.NoError(t, client.Get(ctx, key).Err(), "key %s", key)
	}
}

// written is when a write first succeeded after a fault, or why none did.
type written struct {
	after time.Duration
	err   error
}

// writesAgain retries a SET through the failover client, from now (just
// after a fault) until it succeeds or promotionLimit has passed, in the
// background, so that the client's recovery is timed apart from the
// sentinels'. The channel receives one result, within promotionLimit plus
// one attempt.
func writesAgain(client *redis.Client, key string) <-chan written {
	since := time.Now()
	result := make(chan written, 1)
	go func() {
		for {
			err := client.Set(context.Background(), key, "v", 0).Err()
			if err == nil {
				result <- written{after: time.Since(since)}
				return
			}
			if errors.Is(err, redis.ErrClosed) || time.Since(since) > promotionLimit { // closed: the test has ended
				result <- written{err: fmt.Errorf("the failover client could not write within %v of the fault: %w", promotionLimit, err)}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return result
}

// roleName asks a data server its ROLE directly: "master" or "slave".
func roleName(t *testing.T, s *redisproc.Server) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	role, err := c.Do(context.Background(), "ROLE").Slice()
	require.NoError(t, err, "ROLE on %s", s.Addr())
	return fmt.Sprint(role[0])
}

// get reads a key from one data server directly.
func get(t *testing.T, s *redisproc.Server, key string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	v, err := c.Get(context.Background(), key).Result()
	require.NoError(t, err, "GET %s on %s", key, s.Addr())
	return v
}

func without(servers []*redisproc.Server, s *redisproc.Server) []*redisproc.Server {
	var rest []*redisproc.Server
	for _, x := range servers {
		if x != s {
			rest = append(rest, x)
		}
	}
	return rest
}
