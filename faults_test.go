package setnxlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/faultproxy"
)

// Faults injected below go-redis: a proxy lets commands reach the server
// but loses their replies, and the client runs with go-redis's default
// retries (3), as users' clients do, only with a short read timeout.

func (b *backend) clientThrough(t testing.TB, p *faultproxy.Proxy) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// H5 with real retries: SETNX is applied, its reply lost, go-redis resends
// it (answer 0), and the GET that would show our value fails too. The next
// attempt must still recognise our value instead of waiting out our lease.
func TestLostRepliesWithClientRetriesDoNotOrphanOurLease(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		p := faultproxy.Start(t, b.addr)
		l := b.classicLockerOn(t, b.clientThrough(t, p))
		p.LoseReplies(func(command string, nth int) bool {
			return command == "setnx" && nth == 1 || command == "get"
		})

		_, err := l.TryAcquire(ctx, "lock.k")
		require.Error(t, err)
		require.Equal(t, 2, p.Count("setnx"), "go-redis resent the SETNX")
		ours := b.value(t, "lock.k")
		require.NotEqual(t, "<missing>", ours, "the first SETNX was applied")

		p.LoseReplies(nil)
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "our own value must be recognised")
		require.NoError(t, lock.Release(ctx))
	})
}

// A lost EXEC reply is never answered by resending EXEC: outside its WATCH
// a resent DEL or GETSET would be unconditional. The takeover it carried is
// recognised on the next attempt (H5).
func TestLostExecRepliesAreNeverResent(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		p := faultproxy.Start(t, b.addr)
		l := b.classicLockerOn(t, b.clientThrough(t, p))

		lock, err := l.TryAcquire(ctx, "lock.release")
		require.NoError(t, err)
		// The first EXECs are the Locker's empty check of MULTI
		// (checkTransactions) and the safety net's after SETNX (H6).
		p.LoseReplies(func(command string, nth int) bool { return command == "exec" && nth == 3 })
		require.Error(t, lock.Release(ctx))
		require.Equal(t, 3, p.Count("exec"), "EXEC must not be resent")
		assert.Equal(t, "<missing>", b.value(t, "lock.release"), "the DEL was applied")
		require.NoError(t, lock.Release(ctx), "the retried Release learns it is done")

		b.classicCrashedHolder(t, "lock.takeover")
		p.LoseReplies(func(command string, nth int) bool { return command == "exec" && nth == 4 })
		_, err = l.TryAcquire(ctx, "lock.takeover")
		require.Error(t, err)
		require.Equal(t, 4, p.Count("exec"), "EXEC must not be resent")
		p.LoseReplies(nil)
		taken, err := l.TryAcquire(ctx, "lock.takeover")
		require.NoError(t, err, "our applied takeover must be recognised")
		require.NoError(t, taken.Release(ctx))
	})
}
