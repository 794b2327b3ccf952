package setnxlock

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// ScanStatus lists the lock keys that match a pattern with their holder,
// end and waiters, and leaves out the keys the library keeps beside them
// and the keys that do not match.
func TestScanStatusListsTheLockKeysThatMatch(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		held, err := b.locker(t, path, WithIdentity("report@web-1"), WithFencing()).TryAcquire(ctx, "lock.report")
		require.NoError(t, err)
		_, err = b.locker(t, path, WithFormat(UnixSeconds)).TryAcquire(ctx, "lock.cron")
		require.NoError(t, err)
		b.set(t, "lock.ended", formatValue(b.clock.Now().Add(-time.Minute), "ENDEDTOKEN", "gone:1"))
		b.set(t, "lock.garbage", "hello")
		b.set(t, "other.key", formatValue(b.clock.Now().Add(time.Minute), "OTHERTOKEN", ""))
		lead, err := b.locker(t, path).Campaign(ctx, "lock.jobs", "web-2")
		require.NoError(t, err)
		waiting := acquireInBackground(t, b.locker(t, path), "lock.report")
		b.queued(t, "lock.report", 1)

		l := b.locker(t, path)
		statuses, err := l.ScanStatus(ctx, "*")
		require.NoError(t, err)
		var keys []string
		for _, s := range statuses {
			keys = append(keys, s.Key)
		}
		assert.Equal(t, []string{"lock.cron", "lock.ended", "lock.garbage", "lock.report", "other.key", ElectionKey("lock.jobs")}, keys,
			"every key but the queue, the fence counters and the election's record")

		statuses, err = l.ScanStatus(ctx, "lock.*")
		require.NoError(t, err)
		require.Len(t, statuses, 4, "%v", statuses)
		byKey := map[string]KeyStatus{}
		for _, s := range statuses {
			byKey[s.Key] = s
			want, err := l.Status(ctx, s.Key)
			require.NoError(t, err)
			assert.Equal(t, want, s, "ScanStatus reads %s as Status does", s.Key)
		}
		report := byKey["lock.report"]
		assert.True(t, report.Held)
		assert.Equal(t, "report@web-1", report.Identity)
		assert.True(t, held.ExpiresAt().Equal(report.ExpiresAt), "%v, want %v", report.ExpiresAt, held.ExpiresAt())
		assert.Equal(t, int64(1), report.Waiters)
		assert.True(t, byKey["lock.cron"].Held)
		assert.Equal(t, UnixSeconds, byKey["lock.cron"].Format)
		assert.Empty(t, byKey["lock.cron"].Identity)
		assert.False(t, byKey["lock.ended"].Held)
		assert.Equal(t, "gone:1", byKey["lock.ended"].Identity)
		assert.True(t, byKey["lock.garbage"].Foreign)

		require.NoError(t, held.Release(ctx))
		next := await.Recv(t, waiting, "the waiter handed lock.report")
		require.NoError(t, next.Release(ctx))
		require.NoError(t, lead.Resign(ctx))
	})
}

// Many keys take many SCAN round trips and status batches; none is missed
// or listed twice.
func TestScanStatusReadsManyKeys(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		const n = 2*statusBatch + 7
		for i := range n {
			b.set(t, "lock."+strconv.Itoa(i), formatValue(b.clock.Now().Add(time.Minute), "T"+strconv.Itoa(i), ""))
		}
		statuses, err := b.locker(t).ScanStatus(ctx, "lock.*")
		require.NoError(t, err)
		require.Len(t, statuses, n)
		seen := map[string]bool{}
		for _, s := range statuses {
			assert.False(t, seen[s.Key], "%s listed twice", s.Key)
			seen[s.Key] = true
			assert.True(t, s.Held, s.Key)
		}
		statuses, err = b.locker(t).ScanStatus(ctx, "nothing.*")
		require.NoError(t, err)
		assert.Empty(t, statuses)
	})
}

func TestScanStatusRefusesAnEmptyPattern(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		l := b.lockerOn(t, client)
		sent := record(client)
		_, err := l.ScanStatus(ctx, "")
		require.ErrorIs(t, err, ErrInvalidArgument)
		assert.Empty(t, sent.names(), "nothing sent")
	})
}

func TestTheLibrarysOwnKeysAreToldByName(t *testing.T) {
	for key, own := range map[string]bool{
		waitersKey("lock.a"): true, releasedKey("lock.a"): true, FenceKey("lock.a"): true, LeaderKey("jobs"): true,
		waitersKey("{user}.lock"): true, FenceKey(ElectionKey("jobs")): true,
		"lock.a": false, ElectionKey("jobs"): false, "lock.waiters": false, "lock.fence": false, "{}.fence": false,
	} {
		assert.Equal(t, own, isLibraryKey(key), key)
	}
}
