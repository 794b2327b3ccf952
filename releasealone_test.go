package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// release_alone.lua is a shortcut, not a step of its own: wherever it
// applies, release.lua without it would do exactly the same. Each scenario
// here runs twice on fresh keys, once with the release script users run
// and once with release.lua alone in full (a hook swaps the hash of the
// EVALSHA), and both runs must end alike: Release's answer and what the
// key and its queue hold afterwards.
func TestAReleaseNobodyWaitsForEndsAsTheFullReleaseDoes(t *testing.T) {
	full := redis.NewScript(valueLua + ownedLua + protocolLua + handOnLua + releaseLua)
	scenarios := []struct {
		name string
		run  func(t *testing.T, b *backend, client *redis.Client, key string) error
	}{
		{"ours, nobody queued", func(t *testing.T, b *backend, client *redis.Client, key string) error {
			lock, err := b.lockerOn(t, client, scripted).TryAcquire(ctx, key)
			require.NoError(t, err)
			return lock.Release(ctx)
		}},
		{"ours, lease over by our clock", func(t *testing.T, b *backend, client *redis.Client, key string) error {
			lock, err := b.lockerOn(t, client, scripted).TryAcquire(ctx, key)
			require.NoError(t, err)
			b.clock.Advance(11 * time.Second)
			return lock.Release(ctx) // the courtesy delete, and ErrNotHeld
		}},
		{"taken over by another", func(t *testing.T, b *backend, client *redis.Client, key string) error {
			lock, err := b.lockerOn(t, client, scripted).TryAcquire(ctx, key)
			require.NoError(t, err)
			b.clock.Advance(11 * time.Second)
			_, err = b.locker(t, scripted).TryAcquire(ctx, key)
			require.NoError(t, err)
			return lock.Release(ctx) // ErrNotHeld; the taker's value stays
		}},
		{"deleted under us", func(t *testing.T, b *backend, client *redis.Client, key string) error {
			lock, err := b.lockerOn(t, client, scripted).TryAcquire(ctx, key)
			require.NoError(t, err)
			require.NoError(t, b.raw.Del(ctx, key).Err())
			return lock.Release(ctx) // taken for our own lost reply (H5)
		}},
		{"a waiter queued", func(t *testing.T, b *backend, client *redis.Client, key string) error {
			lock, err := b.lockerOn(t, client, scripted).TryAcquire(ctx, key)
			require.NoError(t, err)
			acquired := acquireInBackground(t, b.locker(t, scripted), key)
			b.queued(t, key, 1)
			err = lock.Release(ctx)
			next := await.Recv(t, acquired, "the queued waiter, handed the key")
			require.NoError(t, next.Release(ctx))
			return err
		}},
	}
	onEachBackend(t, func(t *testing.T, b *backend) {
		require.NoError(t, full.Load(ctx, b.raw).Err())
		for i, s := range scenarios {
			t.Run(s.name, func(t *testing.T) {
				type end struct {
					answer, value string
					queued        int64
				}
				var swapped atomic.Int32
				runOn := func(key string, swap bool) end {
					client := b.client(t)
					if swap {
						client.AddHook(swapScript{from: releaseScript.Hash(), to: full.Hash(), swapped: &swapped})
					}
					err := s.run(t, b, client, key)
					answer := "nil"
					switch {
					case errors.Is(err, ErrNotHeld):
						answer = "ErrNotHeld"
					case err != nil:
						answer = err.Error()
					}
					queued, qerr := b.raw.ZCard(ctx, waitersKey(key)).Result()
					require.NoError(t, qerr)
					value := b.value(t, key)
					if value != "<missing>" {
						value = "held" // by whom differs between the runs: tokens and clock
					}
					return end{answer: answer, value: value, queued: queued}
				}
				fullEnd := runOn(fmt.Sprintf("lock.full.%d", i), true)
				require.Positive(t, swapped.Load(), "the full run ran release.lua in full")
				assert.Equal(t, fullEnd, runOn(fmt.Sprintf("lock.alone.%d", i), false))
			})
		}
	})
}

// swapScript is a go-redis hook that sends one script's EVALSHA with
// another's hash.
type swapScript struct {
	from, to string
	swapped  *atomic.Int32
}

func (swapScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h swapScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 && args[1] == h.from {
			args[1] = h.to
			h.swapped.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (swapScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
