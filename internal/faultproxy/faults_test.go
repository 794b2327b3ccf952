package faultproxy

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheSameSeedDrawsTheSameFaults(t *testing.T) {
	f := Faults{Seed: 42, LatencyRate: 0.3, MaxLatency: time.Millisecond, LoseRate: 0.1, CutRate: 0.1, HoldRate: 0.1, MinHold: time.Millisecond, MaxHold: 2 * time.Millisecond}
	draws := func(conn uint64) []fault {
		rng := rand.New(rand.NewPCG(f.Seed, conn))
		out := make([]fault, 200)
		for i := range out {
			out[i] = f.draw(rng)
		}
		return out
	}
	assert.Equal(t, draws(7), draws(7), "same seed, same connection: same schedule")
	assert.NotEqual(t, draws(7), draws(8), "another connection draws its own schedule")

	var s Stats
	for _, d := range draws(7) {
		s.add(d)
	}
	assert.Positive(t, s.Delayed)
	assert.Positive(t, s.Lost)
	assert.Positive(t, s.Cut)
	assert.Positive(t, s.Held)
}

func TestRandomFaultsAreSeenBelowTheClient(t *testing.T) {
	ctx := context.Background()
	server := miniredis.RunT(t)
	p := Start(t, server.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })

	require.NoError(t, client.Ping(ctx).Err(), "connected (go-redis's handshake) before the faults start")
	require.NoError(t, p.SetFaults(Faults{Seed: 1, LoseRate: 1}))
	require.Error(t, client.Set(ctx, "lost", "1", 0).Err(), "the reply is swallowed")
	v, err := server.Get("lost")
	require.NoError(t, err)
	assert.Equal(t, "1", v, "the server applied the command")

	require.NoError(t, p.SetFaults(Faults{Seed: 1, CutRate: 1}))
	require.Error(t, client.Set(ctx, "cut", "1", 0).Err(), "the new connection is cut at its first request")

	require.NoError(t, p.SetFaults(Faults{}))
	require.NoError(t, client.Set(ctx, "after", "1", 0).Err(), "a new connection works again")
	assert.Equal(t, Stats{Lost: 1, Cut: 1}, p.Stats(), "one request lost, one connection cut")
	assert.Error(t, p.SetFaults(Faults{LoseRate: 2}), "a rate above 1 is refused")
}

func TestAHeldRequestLandsAfterTheClientsLaterOne(t *testing.T) {
	ctx := context.Background()
	server := miniredis.RunT(t)
	p := Start(t, server.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), ClientName: "c1", MaxRetries: -1, ReadTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	require.NoError(t, client.Ping(ctx).Err(), "connected (and named) before the faults start")

	p.HoldRequestsTo(func(args []string) time.Duration {
		if len(args) == 3 && args[2] == "first" {
			return 300 * time.Millisecond
		}
		return 0
	})
	err := client.Set(ctx, "k", "first", 0).Err()
	var netErr interface{ Timeout() bool }
	require.ErrorAs(t, err, &netErr, "the client gives up on the held request")
	assert.True(t, netErr.Timeout())

	require.NoError(t, client.Set(ctx, "k", "second", 0).Err(), "the client goes on, on a new connection")
	v, err := server.Get("k")
	require.NoError(t, err)
	require.Equal(t, "second", v, "the later request reached the server first")

	deadline := time.Now().Add(5 * time.Second)
	for v, _ := server.Get("k"); v != "first"; v, _ = server.Get("k") {
		require.True(t, time.Now().Before(deadline), "the held SET was never delivered after its client closed its side")
		time.Sleep(5 * time.Millisecond)
	}
	deadline = time.Now().Add(5 * time.Second)
	for p.Stats().Overtaken == 0 {
		require.True(t, time.Now().Before(deadline), "the held request was not counted as overtaken")
		time.Sleep(5 * time.Millisecond)
	}
	assert.Equal(t, Stats{Held: 1, Overtaken: 1}, p.Stats())

	p.HoldRequestsTo(nil)
	require.NoError(t, p.SetFaults(Faults{Seed: 1, HoldRate: 1, MinHold: 300 * time.Millisecond, MaxHold: 300 * time.Millisecond}))
	require.Error(t, client.Set(ctx, "k", "third", 0).Err(), "at random too: every request is held")
	assert.Equal(t, 2, p.Stats().Held)
	assert.Error(t, p.SetFaults(Faults{HoldRate: 0.1, MinHold: time.Second, MaxHold: time.Millisecond}), "an empty range is refused")
}
