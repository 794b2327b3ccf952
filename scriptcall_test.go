package setnxlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A release on a server that has not got the release script (a restart, a
// SCRIPT FLUSH) sends it as EVAL once the server answers its EVALSHA with
// NOSCRIPT, with the same keys and arguments, as go-redis's Script.Run
// does, and releases; the next release finds the script there.
func TestAReleaseSendsItsScriptWhereTheServerHasNone(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		l := b.lockerOn(t, client)
		sent := &sentCommands{}
		client.AddHook(sent)
		for _, key := range []string{"lock.a", "lock.b"} {
			lock, err := l.TryAcquire(ctx, key)
			require.NoError(t, err)
			if key == "lock.a" {
				require.NoError(t, b.raw.ScriptFlush(ctx).Err())
			}
			sent.reset()
			require.NoError(t, lock.Release(ctx))
			assert.Equal(t, "<missing>", b.value(t, key))
			cmds := sent.all()
			if key == "lock.b" {
				require.Len(t, cmds, 1, "the script loaded by the EVAL before")
				assert.Equal(t, "evalsha", cmds[0].Name())
				continue
			}
			require.Len(t, cmds, 2, "EVALSHA, then EVAL")
			evalsha, eval := cmds[0].Args(), cmds[1].Args()
			assert.Equal(t, []any{"evalsha", releaseScript.Hash()}, evalsha[:2], "the EVALSHA as it was sent")
			require.Error(t, cmds[0].Err())
			assert.Contains(t, cmds[0].Err().Error(), "NOSCRIPT")
			assert.Equal(t, []any{"eval", releaseSource}, eval[:2])
			assert.Equal(t, evalsha[2:], eval[2:], "the same keys and arguments")
			assert.Equal(t, []any{2, key, waitersKey(key)}, eval[2:5], "the keys: the lock's and its queue's (the default hands over)")
		}
	})
}

// The safety nets a Locker boxes once are the nets each call computed: the
// same int64 for a lease of its TTL in every format, whatever rounding the
// instant calls for, and for a lease of any other length.
func TestBoxedNetsAreTheNetsComputed(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: startMiniredis(t)})
	t.Cleanup(func() { _ = client.Close() })
	for _, options := range [][]Option{nil, {WithExpiryGrace(5 * time.Second)}, {WithTTL(1500 * time.Millisecond)}} {
		for _, format := range []Format{TokenFormat, UnixMillis, UnixSeconds, FloatSeconds} {
			l, err := New(client, append(options, WithFormat(format))...)
			require.NoError(t, err)
			start := clockStart()
			for step := range 3000 {
				ours := l.attemptStamp(start.Add(time.Duration(step)*777*time.Microsecond), "")
				require.Equal(t, any(l.safetyNet(ours.length()).Milliseconds()), l.netArg(ours.length()), "%v, a lease of %v", format, ours.length())
			}
			assert.Equal(t, any(l.safetyNet(time.Hour).Milliseconds()), l.netArg(time.Hour))
			require.NoError(t, l.Close())
		}
	}
}

// sentCommands records the commands a client sends alone.
type sentCommands struct {
	mu   sync.Mutex
	cmds []redis.Cmder
}

func (s *sentCommands) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmds = nil
}

func (s *sentCommands) all() []redis.Cmder {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]redis.Cmder(nil), s.cmds...)
}

func (s *sentCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sentCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.mu.Lock()
		s.cmds = append(s.cmds, cmd)
		s.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (s *sentCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
