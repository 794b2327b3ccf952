package setnxlock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
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
	assert.Equal(t, "SET EVALSHA EVALSHA WATCH GET ZRANGE MULTI DEL EXEC", sent.names(), "the release script refused (with and without its optional keys), then commands only")

	sent.reset()
	lock, err = l.TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	assert.Equal(t, "SET WATCH GET ZRANGE MULTI DEL EXEC", sent.names(), "scripts stay off")
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
			waiter := b.lockerOn(t, restrictedClient(t, b, "waiter", rules...), p.opt,
				WithClock(systemClock{}), WithBackoff(time.Millisecond, 5*time.Millisecond))
			acquired := make(chan *Lock, 1)
			go func() {
				lock, err := waiter.Acquire(await.Context(t), "lock.k")
				assert.NoError(t, err)
				claimSettled(lock)
				acquired <- lock
			}()

			// The waiter, refused, subscribes in the background and is
			// refused; only then is the key released, so the waiter can
			// only get it by polling.
			if p.name == "scripts" { // it queues: its first SUBSCRIBE is of the Locker's handoff channel
				require.Eventually(t, func() bool { return !waiter.caps.allows(capQueue) }, 5*time.Second, time.Millisecond,
					"the refused SUBSCRIBE turning the handoff off")
			} else {
				require.Eventually(t, func() bool { return !waiter.caps.allows(capPubSub) }, 5*time.Second, time.Millisecond,
					"the refused SUBSCRIBE turning wake-ups off")
			}
			require.NoError(t, holder.Release(ctx))
			lock := await.Recv(t, acquired, "the waiter's Acquire, polling, once the key was released")
			require.NotNil(t, lock)
			require.NoError(t, lock.Release(ctx))
			assert.Equal(t, "<missing>", b.value(t, "lock.k"))
		})
	}
}

// Issue 11, finding 8, on a real server: while a failed snapshot makes
// Redis refuse writes with MISCONF (whose prose says "disabled"), attempts
// fail, but nothing is switched off: once the server writes again, the
// Locker is back on its scripts and its handoff.
func TestATransientMISCONFSwitchesNothingOff(t *testing.T) {
	b := newBackend(t, "redis-server", redistest.Start(t, "--enable-protected-configs", "yes", "--save", "3600 1").Addr())
	client := b.client(t)
	l := b.lockerOn(t, client, scripted)
	warm(t, l)

	dir := filepath.Join(t.TempDir(), "snapshots")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, b.raw.ConfigSet(ctx, "dir", dir).Err())
	require.NoError(t, b.raw.ConfigSet(ctx, "stop-writes-on-bgsave-error", "yes").Err())
	require.NoError(t, os.Remove(dir)) // the snapshot cannot be written
	bgsave := func(want string) {
		t.Helper()
		require.Eventually(t, func() bool {
			_ = b.raw.BgSave(ctx).Err() // refused while one is running
			return strings.Contains(b.raw.Info(ctx, "persistence").Val(), "rdb_last_bgsave_status:"+want)
		}, 10*time.Second, 20*time.Millisecond, "a BGSAVE ending %s", want)
	}
	bgsave("err")

	_, err := l.TryAcquire(ctx, "lock.k")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MISCONF")
	assert.True(t, l.caps.allows(capScripts), "scripts stay on after MISCONF")
	assert.True(t, l.caps.allows(capQueue), "the handoff stays on after MISCONF")
	assert.True(t, l.caps.allows(capSetNXPX), "SET NX PX stays on after MISCONF")
	assert.True(t, l.caps.allows(capSetGet), "SET NX PX GET stays on after MISCONF")

	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, b.raw.ConfigSet(ctx, "dir", dir).Err()) // the server's working directory was the one removed
	bgsave("ok")
	sent := record(client)
	lock, err := l.TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	assert.Equal(t, "SET EVALSHA", sent.names(), "back on SET NX PX GET and the scripted path")
}
