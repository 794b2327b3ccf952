package setnxlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refuseSetGet plays a server before Redis 7.0, or a proxy, that refuses
// SET's NX option with GET as a syntax error, without running it.
type refuseSetGet struct{}

func (refuseSetGet) DialHook(next redis.DialHook) redis.DialHook { return next }

func (refuseSetGet) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "set" && args[len(args)-1] == "get" {
			err := serverError("ERR syntax error")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (refuseSetGet) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// An unqueued attempt's first step is one command, SET NX PX GET, on the
// scripts and the commands alike: it creates the key with its safety net
// (H6), or answers the holder's value.
func TestAnUnqueuedAttemptIsOneSetNXPXGet(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		if p.name == "classic" {
			t.Skip("the classic page: SETNX")
		}
		client := b.client(t)
		l := b.lockerOn(t, client, p.opt, WithExpiryGrace(5*time.Second))
		sent := record(client)
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		assert.Equal(t, "SET", sent.names())
		assert.Equal(t, 15*time.Second, b.raw.PTTL(ctx, "lock.k").Val().Round(time.Second), "lease + grace")

		sent.reset()
		_, err = b.lockerOn(t, client, p.opt).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, "SET", sent.names(), "the holder's value came with the refusal")
		assert.Equal(t, lock.value, b.value(t, "lock.k"), "a held key is left untouched")
		require.NoError(t, lock.Release(ctx))
	})
}

// A server that refuses SET NX PX GET (before Redis 7.0, or a proxy) turns
// it off for the Locker for good, and the same attempt takes the way
// without it at once: a refused command did not run.
func TestARefusedSetGetFallsBackInTheSameAttempt(t *testing.T) {
	want := map[string][2]string{
		"scripts":  {"SET EVALSHA", "EVALSHA"},
		"commands": {"SET SET", "SET GET"},
	}
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		if p.name == "classic" {
			t.Skip("the classic page never sends it")
		}
		client := b.client(t)
		l := b.lockerOn(t, client, p.opt)
		warm(t, l)
		sent := record(client) // sees the refused command too
		client.AddHook(refuseSetGet{})
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "won by the way without SET NX PX GET")
		assert.Equal(t, want[p.name][0], sent.names())
		assert.False(t, l.caps.allows(capSetGet), "off for good")
		assert.Equal(t, p.name == "scripts", l.caps.allows(capScripts), "the scripts stay on")

		sent.reset()
		_, err = l.TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, want[p.name][1], sent.names(), "not sent again")
		require.NoError(t, lock.Release(ctx))
	})
}

// H5: go-redis resends SET NX PX GET whose first copy the server applied
// and whose reply was lost; the copy answers our own value, which the
// attempt recognises as its win.
func TestAResentSetGetRecognisesItsOwnValue(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		if p.name == "classic" {
			t.Skip("the classic page never sends it")
		}
		client := b.client(t)
		resent := false
		hookCommand(client, "set", func(send func() error) error {
			if err := send(); resent || err != nil && err != redis.Nil {
				return err
			}
			resent = true
			return send() // the first reply was lost: go-redis sends it again
		})
		l := b.lockerOn(t, client, p.opt)
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "our own value, recognised")
		require.True(t, resent, "the schedule: the command was resent")
		assert.Equal(t, lock.value, b.value(t, "lock.k"))
		assert.Positive(t, b.raw.PTTL(ctx, "lock.k").Val(), "the safety net (H6)")
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}
