package setnxlock

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// calls returns how often redis-server ran command, from INFO
// commandstats: commands run inside scripts included.
func calls(t *testing.T, b *backend, command string) int {
	t.Helper()
	info, err := b.raw.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls=")
		if ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// The common path pays only for itself: where the Locker hands over, an
// uncontended release publishes nothing, on any path; with a waiter on
// wake-ups listed in the queue, it publishes once.
func TestAnUncontendedReleasePublishesNothing(t *testing.T) {
	for _, p := range queueingPaths {
		t.Run(p.name, func(t *testing.T) {
			b := realServer(t)
			l := b.locker(t, p.opt)
			require.True(t, l.handsOver())
			before := calls(t, b, "publish")
			lock, err := l.TryAcquire(ctx, "lock.k")
			require.NoError(t, err)
			require.NoError(t, lock.Release(ctx))
			assert.Equal(t, before, calls(t, b, "publish"), "no PUBLISH nobody hears")
		})
	}
}

// Decision 3 of issue 24, "no release goes unheard": a wait on wake-ups
// (here a Locker that does not queue: WithFencing) lists itself in the
// key's queue, and a release by a Locker that hands over, scripted or by
// commands, takes it off and wakes it. Its backoff is an hour and the
// ManualClock stands still, so only the wake-up can serve it.
func TestAWaitOnWakeUpsIsWokenByAReleaseThatHandsOver(t *testing.T) {
	for _, p := range queueingPaths {
		t.Run(p.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				holder, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				waiter := b.locker(t, WithFencing(), WithBackoff(time.Hour, time.Hour))
				require.False(t, waiter.queues())
				acquired := acquireInBackground(t, waiter, "lock.k")
				listed := b.queued(t, "lock.k", 1)
				_, _, isEntry := parseEntry(listed[0])
				require.False(t, isEntry, "a listener, not an entry: %q", listed[0])

				require.NoError(t, holder.Release(ctx))
				lock := await.Recv(t, acquired, "the wait on wake-ups, woken by the release")
				require.NoError(t, lock.Release(ctx))
			})
		})
	}
}
