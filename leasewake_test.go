package setnxlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// attemptClock records, for every attempt's first step a client sends
// (the acquire or queued script), the Locker's clock at that moment.
type attemptClock struct {
	clock Clock
	mu    sync.Mutex
	at    []time.Time
}

func recordAttempts(c *redis.Client, clock Clock) *attemptClock {
	a := &attemptClock{clock: clock}
	c.AddHook(a)
	return a
}

func (a *attemptClock) DialHook(next redis.DialHook) redis.DialHook { return next }
func (a *attemptClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			if name := scriptNames[cmd.Args()[1].(string)]; name == "acquire" || name == "queued" {
				a.mu.Lock()
				a.at = append(a.at, a.clock.Now())
				a.mu.Unlock()
			}
		}
		return next(ctx, cmd)
	}
}
func (a *attemptClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (a *attemptClock) sent() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at...)
}

// H4 with the precise wake at a lease's end (leasewake.go): a queued
// waiter wakes a little early, so that it attempts the moment the lease is
// over, but it never attempts before the lease is over by its Locker's
// clock (takeableAt, skew margin included). The clock is held 500µs short
// of that instant, within the early timer's reach: once queued, the waiter
// sends nothing, however long the clock stays there; once the clock gets
// there it takes over at once.
func TestTheWakeAtALeasesEndNeverAttemptsBeforeItIsOver(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		crashed, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		client := b.client(t)
		l := b.lockerOn(t, client, WithSkewMargin(5*time.Millisecond))
		warm(t, l)
		attempts := recordAttempts(client, b.clock)
		takeable := l.takeableAt(crashed.ExpiresAt())
		b.clock.Set(takeable.Add(-500 * time.Microsecond))

		acquired := acquireInBackground(t, l, "lock.k")
		b.queued(t, "lock.k", 1)
		time.Sleep(20 * time.Millisecond) // its early timer fires and the spin gives up: the clock does not move
		settled := len(attempts.sent())
		time.Sleep(20 * time.Millisecond)
		assert.Equal(t, settled, len(attempts.sent()), "the queued waiter attempted again before the lease was over by its clock")

		b.clock.Set(takeable)
		lock := await.Recv(t, acquired, "the waiter's takeover once the clock reached the lease's end")
		require.NotNil(t, lock)
		sent := attempts.sent()
		assert.Equal(t, takeable, sent[len(sent)-1], "the winning attempt was sent at the lease's end by the clock")
		require.NoError(t, lock.Release(ctx))
	})
}
