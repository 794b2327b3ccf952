package faultproxy

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestALostReplyIsAppliedButNeverSeen(t *testing.T) {
	ctx := context.Background()
	server := miniredis.RunT(t)
	p := Start(t, server.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })

	require.NoError(t, client.Set(ctx, "before", "1", 0).Err(), "no fault: replies arrive")
	p.LoseReplies(func(command string, nth int) bool { return command == "set" && nth == 2 })
	err := client.Set(ctx, "lost", "1", 0).Err()
	require.Error(t, err)
	var netErr interface{ Timeout() bool }
	require.ErrorAs(t, err, &netErr)
	assert.True(t, netErr.Timeout())

	v, err := server.Get("lost")
	require.NoError(t, err)
	assert.Equal(t, "1", v, "the server applied the command")

	p.LoseReplies(nil)
	require.NoError(t, client.Set(ctx, "after", "1", 0).Err(), "a new connection works again")
	assert.Equal(t, 3, p.Count("SET"))
}

func TestARuleOnArgumentsLosesOnlyTheRepliesItPicks(t *testing.T) {
	ctx := context.Background()
	server := miniredis.RunT(t)
	p := Start(t, server.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })

	p.LoseRepliesTo(func(args []string) bool { return len(args) == 3 && args[1] == "queued" })
	require.NoError(t, client.Set(ctx, "other", "1", 0).Err(), "another key: the reply arrives")
	require.Error(t, client.Set(ctx, "queued", "1", 0).Err(), "the picked request's reply is lost")
	v, err := server.Get("queued")
	require.NoError(t, err)
	assert.Equal(t, "1", v, "the server applied the command")
	assert.Equal(t, 1, p.Stats().Lost)

	p.LoseRepliesTo(nil)
	require.NoError(t, client.Set(ctx, "queued", "2", 0).Err(), "no rule: replies arrive again")
}

func TestAFrozenProxyHoldsRequestsUntilThawed(t *testing.T) {
	ctx := context.Background()
	server := miniredis.RunT(t)
	p := Start(t, server.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	require.NoError(t, client.Ping(ctx).Err(), "no fault: replies arrive")

	p.Freeze()
	err := client.Set(ctx, "held", "1", 0).Err()
	var netErr interface{ Timeout() bool }
	require.ErrorAs(t, err, &netErr, "a frozen proxy answers nothing")
	assert.True(t, netErr.Timeout())
	assert.False(t, server.Exists("held"), "the request is held, not applied")

	p.Thaw()
	deadline := time.Now().Add(5 * time.Second)
	for !server.Exists("held") {
		require.True(t, time.Now().Before(deadline), "the held SET was never delivered after Thaw")
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, client.Ping(ctx).Err(), "a new connection works again")
}
