package setnxlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/redistest"
)

// restrictedClient returns a client logged in as a new ACL user of a real
// redis-server with the given rules on top of all keys.
func restrictedClient(t *testing.T, b *backend, user string, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"acl", "setuser", user, "on", ">secret", "~*"}
	for _, rule := range rules {
		args = append(args, rule)
	}
	require.NoError(t, b.raw.Do(ctx, args...).Err())
	c := redis.NewClient(&redis.Options{Addr: b.addr, Username: user, Password: "secret", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func realServer(t *testing.T) *backend {
	return newBackend(t, "redis-server", redistest.Start(t).Addr())
}

// A user without @scripting: the first script is refused with NOPERM, the
// Locker falls back to the commands for good, and the lock works all the
// same.
func TestAUserWithoutScriptingFallsBackToCommands(t *testing.T) {
	b := realServer(t)
	client := restrictedClient(t, b, "noscripts", "&*", "+@all", "-@scripting")
	sent := record(client)
	l := b.lockerOn(t, client, paths[0].opt)

	lock, err := l.TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	assert.Equal(t, "EVALSHA SET WATCH GET MULTI DEL PUBLISH EXEC", sent.names(), "refused once, then commands only")

	sent.reset()
	lock, err = l.TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	assert.Equal(t, "SET WATCH GET MULTI DEL PUBLISH EXEC", sent.names(), "scripts stay off")
}

// A user without pub/sub: the release's PUBLISH is refused (inside the
// script it is ignored; inside MULTI it aborts the transaction, which is
// sent again without it), waiters cannot subscribe and poll instead, and
// locks work all the same.
func TestAUserWithoutPubSubStillReleasesAndWaitersPoll(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			b := realServer(t)
			rules := []string{"resetchannels", "+@all", "-publish", "-subscribe"}
			holder, err := b.lockerOn(t, restrictedClient(t, b, "holder", rules...), p.opt).TryAcquire(ctx, "lock.k")
			require.NoError(t, err)
			released := make(chan error, 1)
			waiter := b.lockerOn(t, restrictedClient(t, b, "waiter", rules...), p.opt,
				WithClock(systemClock{}), WithBackoff(time.Millisecond, 5*time.Millisecond),
				WithObserver(ObserverFunc(func(e Event) {
					if e.Kind == EventContended {
						go func() { released <- holder.Release(ctx) }() // after the waiter was refused
					}
				})))

			lock, err := waiter.Acquire(context.Background(), "lock.k")
			require.NoError(t, err)
			require.NoError(t, <-released)
			require.NoError(t, lock.Release(ctx))
			assert.False(t, waiter.wakeups.usable(), "the refused SUBSCRIBE turned wake-ups off")
			assert.Equal(t, "<missing>", b.value(t, "lock.k"))
		})
	}
}
