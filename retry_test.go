package setnxlock

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
