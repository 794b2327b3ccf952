package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

func TestBackoffGrowsWithJitterUpToItsCap(t *testing.T) {
	b := newBackoff(4*time.Millisecond, 32*time.Millisecond)
	for _, step := range []time.Duration{4, 8, 16, 32, 32, 32} {
		step *= time.Millisecond
		wait := b.next()
		assert.GreaterOrEqual(t, wait, step/2)
		assert.LessOrEqual(t, wait, step)
	}
}

func TestWaitIsCutShortByTheHoldersLease(t *testing.T) {
	const jitter = maxLeaseJitter
	cases := []struct {
		name            string
		wait, remaining time.Duration
		atLeast, atMost time.Duration
	}{
		{"lease outlasts the wait", 100 * time.Millisecond, time.Second, 100 * time.Millisecond, 100 * time.Millisecond},
		{"lease ends first", 100 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond, 30*time.Millisecond + jitter},
		{"lease already over", 100 * time.Millisecond, -time.Second, 0, jitter},
	}
	for _, c := range cases {
		for _, minBackoff := range []time.Duration{time.Microsecond, jitter, time.Minute} {
			got := capAtLease(c.wait, c.remaining, minBackoff)
			assert.GreaterOrEqual(t, got, c.atLeast, c.name)
			assert.LessOrEqual(t, got, c.atMost, "%s, min backoff %v", c.name, minBackoff)
		}
	}
}

// With a backoff far longer than the holder's lease, Acquire still wakes
// when the lease ends rather than after the backoff.
func TestAcquireWakesWhenTheHoldersLeaseEnds(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		_, err := b.locker(t, WithClock(systemClock{}), WithTTL(50*time.Millisecond)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		waiter := b.locker(t, WithClock(systemClock{}), WithBackoff(time.Minute, time.Minute))
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		lock, err := waiter.Acquire(ctx, "lock.k")
		require.NoError(t, err, "Acquire slept past the holder's lease")
		require.NoError(t, lock.Release(ctx))
	})
}

func TestAcquireRetriesOnlyWhatMayHeal(t *testing.T) {
	cases := []struct {
		err   error
		retry bool
	}{
		{ErrNotAcquired, true},
		{fmt.Errorf("wrapped: %w", ErrNotAcquired), true},
		{redis.TxFailedErr, true},
		{errLostReply{}, true},
		{io.EOF, true},
		{serverError("LOADING Redis is loading the dataset in memory"), true},
		{serverError("READONLY You can't write against a read only replica."), true},
		{serverError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{ErrInvalidArgument, false},
		{ErrNotLockValue, false},
		{ErrWatchIgnored, false},
		{serverError("NOPERM this user has no permissions to run the 'getset' command"), false},
		{serverError("ERR unknown command 'SETNX'"), false},
		{serverError("MISCONF Errors writing to the AOF file: No space left on device"), true},
		{serverError("OOM command not allowed when used memory > 'maxmemory'."), true},
		{redis.ErrClosed, false}, // every later attempt fails at once: returning beats spinning
	}
	for _, c := range cases {
		assert.Equal(t, c.retry, retryable(c.err), "%v", c.err)
	}
}

// serverError is an error reply from Redis, as go-redis reports it.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

var _ redis.Error = serverError("")

// Issue 11, finding 8: only a reply whose code says "not allowed" or "not
// known" turns a feature off for good. MISCONF's prose contains "disabled";
// it is transient all the same, like every code that means "not now".
func TestOnlyRefusalsForGoodSwitchAFeatureOff(t *testing.T) {
	for reply, want := range map[string]bool{
		"NOPERM this user has no permissions to run the 'evalsha' command": true,
		"NOPERM No permissions to access a key":                            true,
		"ERR unknown command 'EVALSHA', with args beginning with: ":        true,
		"ERR unknown subcommand 'foo'. Try CLIENT HELP.":                   true,
		"ERR syntax error": true,
		"ERR wrong number of arguments for 'set' command": true,
		"ERR unsupported command 'evalsha'":               true,
		"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.": false,
		"OOM command not allowed when used memory > 'maxmemory'.":                                  false,
		"READONLY You can't write against a read only replica.":                                    false,
		"LOADING Redis is loading the dataset in memory":                                           false,
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.": false,
		"TRYAGAIN Multiple keys request during rehashing of slot":                                  false,
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.":         false,
		"CLUSTERDOWN The cluster is down":                                                          false,
		"NOREPLICAS Not enough good replicas to write.":                                            false,
		"NOSCRIPT No matching script. Please use EVAL.":                                            false,
		"WRONGTYPE Operation against a key holding the wrong kind of value":                        false,
	} {
		assert.Equal(t, want, refused(serverError(reply)), "%q", reply)
	}
	assert.False(t, refused(errors.New("ERR unknown command, but not a reply")), "not a server reply")
	assert.True(t, refused(errors.Join(serverError("NOPERM no"), serverError("EXECABORT Transaction discarded"))), "the refused command inside an aborted transaction")
	assert.False(t, refused(errors.Join(serverError("LOADING loading"), serverError("EXECABORT Transaction discarded"))), "a transaction aborted by a restart")
}

// Issue 11, finding 7: a waiter whose go-redis client is closed under it
// returns the client's error at once. Before, the closed subscription's
// channel read as a release announced, every time: a wake-up waiter spun at
// full CPU until its context ended. Both kinds of waiter: one woken by
// pub/sub (a fencing Locker, which does not queue) and one queued.
func TestAClosedClientEndsAWaitInsteadOfSpinning(t *testing.T) {
	type kind struct {
		name string
		opts []Option
		// waiting reports that the waiter listens, so closing its client
		// now closes a live subscription.
		waiting func(b *backend, key string) bool
	}
	kinds := []kind{{"woken by pub/sub", []Option{scripted, WithFencing()}, func(b *backend, key string) bool {
		return b.raw.PubSubNumSub(ctx, WakeChannel(key)).Val()[WakeChannel(key)] == 1
	}}}
	for _, p := range queueingPaths {
		kinds = append(kinds, kind{"queued/" + p.name, []Option{p.opt}, func(b *backend, key string) bool {
			return len(b.queuedNow(key)) == 1
		}})
	}
	for _, waiter := range kinds {
		t.Run(waiter.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, b *backend) {
				_, err := b.locker(t, waiter.opts[0]).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				client := b.client(t)
				l := b.lockerOn(t, client, waiter.opts...)
				waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				result := make(chan error, 1)
				go func() { _, err := l.Acquire(waitCtx, "lock.k"); result <- err }()
				require.Eventually(t, func() bool { return waiter.waiting(b, "lock.k") }, 5*time.Second, time.Millisecond, "the waiter listening")

				require.NoError(t, client.Close())
				err = await.Recv(t, result, "the wait ending after its client was closed")
				require.ErrorIs(t, err, redis.ErrClosed)
				assert.NoError(t, waitCtx.Err(), "it returned before its context ended")
			})
		})
	}
}
