package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServerCanBeKilledRestartedAndPaused(t *testing.T) {
	ctx := context.Background()
	s := Start(t)
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	require.NoError(t, client.Set(ctx, "k", "v", 0).Err())

	s.Kill()
	require.Error(t, client.Ping(ctx).Err(), "a killed server must not answer")

	s.Restart()
	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, client.Get(ctx, "k").Err(), redis.Nil, "without persistence a restart loses every key")

	s.Pause()
	require.Error(t, client.Ping(ctx).Err(), "a paused server must not answer")
	s.Resume()
	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)
}

func TestServersGetDistinctPorts(t *testing.T) {
	a, b := Start(t), Start(t)
	require.NotEqual(t, a.Addr(), b.Addr())
}
