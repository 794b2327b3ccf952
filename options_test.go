package setnxlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

func TestBadConfigurationIsRejected(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = client.Close() })
	var typedNil *redis.Client

	cases := map[string]struct {
		client redis.UniversalClient
		opts   []Option
	}{
		"nil client":             {client: nil},
		"typed nil client":       {client: typedNil},
		"zero TTL":               {client: client, opts: []Option{WithTTL(0)}},
		"negative TTL":           {client: client, opts: []Option{WithTTL(-time.Second)}},
		"TTL below a ms":         {client: client, opts: []Option{WithTTL(time.Microsecond)}},
		"nil clock":              {client: client, opts: []Option{WithClock(nil)}},
		"nil option":             {client: client, opts: []Option{nil}},
		"zero backoff":           {client: client, opts: []Option{WithBackoff(0, time.Second)}},
		"backoff below floor":    {client: client, opts: []Option{WithBackoff(time.Nanosecond, time.Nanosecond)}},
		"backoff max below min":  {client: client, opts: []Option{WithBackoff(time.Second, time.Millisecond)}},
		"negative backoff bound": {client: client, opts: []Option{WithBackoff(-time.Millisecond, time.Second)}},
		"unknown format":         {client: client, opts: []Option{WithFormat(Format(42))}},
		"negative format":        {client: client, opts: []Option{WithFormat(Format(-1))}},
		"negative starvation":    {client: client, opts: []Option{WithStarvationThreshold(-time.Millisecond)}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			l, err := New(c.client, c.opts...)
			require.ErrorIs(t, err, ErrInvalidArgument)
			assert.Nil(t, l)
		})
	}
}

func TestDefaultsAreDocumentedValues(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	l, err := New(client)
	require.NoError(t, err)
	assert.Equal(t, DefaultTTL, l.TTL())
	assert.Equal(t, 10*time.Second, DefaultTTL, "DESIGN.md promises a 10s default lease")
	assert.Equal(t, systemClock{}, l.cfg.clock)
}

// Bad input to the lock calls is refused before any command is sent.
func TestBadCallsWriteNothing(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		sent := record(client)
		l := b.classicLockerOn(t, client)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()

		_, err := l.TryAcquire(ctx, "")
		require.ErrorIs(t, err, ErrInvalidArgument)
		_, err = l.Acquire(await.Context(t), "")
		require.ErrorIs(t, err, ErrInvalidArgument)

		_, err = l.TryAcquire(cancelled, "lock.k")
		require.ErrorIs(t, err, context.Canceled)
		_, err = l.Acquire(cancelled, "lock.k")
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, ErrNotAcquired)

		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		sent.reset()
		require.ErrorIs(t, lock.Release(cancelled), context.Canceled)
		require.NoError(t, lock.Release(ctx), "a Release that failed on its context can be retried")

		assert.Equal(t, "WATCH GET ZRANGE MULTI DEL EXEC", sent.names(), "only the successful Release reached Redis")
		assert.Zero(t, b.raw.DBSize(ctx).Val())
	})
}
