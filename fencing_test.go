package setnxlock

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

func TestFencingTokensIncreaseAcrossReleasesAndTakeovers(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		fenced := func() *Locker { return b.locker(t, WithFencing()) }

		first, err := fenced().TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.NoError(t, first.Release(ctx))

		crashed, err := fenced().TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		b.clock.Set(crashed.ExpiresAt())
		recovered, err := fenced().TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		assert.Less(t, first.FencingToken(), crashed.FencingToken())
		assert.Less(t, crashed.FencingToken(), recovered.FencingToken(), "a takeover draws a higher token")
		assert.Equal(t, strconv.FormatInt(recovered.FencingToken(), 10), b.value(t, FenceKey("lock.k")))

		plain, err := b.locker(t).TryAcquire(ctx, "lock.other")
		require.NoError(t, err)
		assert.Zero(t, plain.FencingToken(), "no token without WithFencing")
	})
}

// "A paused loser must never mint a higher token than the next holder": a
// client stalled in the middle of its takeover must either fail or come
// back with a token lower than the holder that overtook it, so the
// protected resource rejects it.
func TestAStalledTakerNeverOutranksTheNextHolder(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.classicCrashedHolder(t, "lock.k")
		client := b.client(t)
		stalled := gateBefore(t, client, "incr", 2) // the takeover's; the first came with its losing SETNX
		type result struct {
			lock *Lock
			err  error
		}
		done := make(chan result, 1)
		go func() {
			l, err := b.classicLockerOn(t, client, WithFencing()).TryAcquire(ctx, "lock.k")
			done <- result{l, err}
		}()
		stalled.wait(t)

		b.clock.Advance(10 * time.Second) // the stalled client's lease, if any, is over
		next, err := b.classicLocker(t, WithFencing()).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		stalled.pass()
		r := await.Recv(t, done, "the stalled takeover")
		require.Error(t, r.err, "the stalled takeover's transaction must not run after the key changed")
		assert.Nil(t, r.lock)
		assert.Equal(t, next.FencingToken(), mustInt(t, b.value(t, FenceKey("lock.k")))-1,
			"only the stalled client's losing SETNX drew after the next holder")
	})
}

// H5 with fencing: the lease whose reply was lost is ours, but its token is
// unknown, so the Locker gives it up and acquires again with a fresh one.
func TestALostFencedReplyStartsOverForAFreshToken(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		loseReply(client, "exec")
		l := b.classicLockerOn(t, client, WithFencing())

		_, err := l.TryAcquire(ctx, "lock.k")
		require.Error(t, err)
		orphan := b.value(t, "lock.k")
		lost := b.value(t, FenceKey("lock.k"))

		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		assert.NotEqual(t, orphan, b.value(t, "lock.k"))
		assert.Greater(t, strconv.FormatInt(lock.FencingToken(), 10), lost)
		require.NoError(t, lock.Release(ctx))
	})
}

// Tokens strictly increase from one holder to the next under contention,
// with holders crashing and their locks recovered by takeover.
func TestFencingTokensStrictlyIncreaseUnderContention(t *testing.T) {
	const workers, lockers, cycles = 16, 4, 30
	onEachBackend(t, func(t *testing.T, b *backend) {
		ls := make([]*Locker, lockers)
		for i := range ls {
			// 400ms: each Release must find its lease live, and a 150ms lease
			// ran out between Acquire and Release in a clean-clone CI run on a
			// loaded two-core machine under -race (ErrNotHeld, correctly: H11).
			// The crashed holders (8) cost a lease each.
			ls[i] = b.locker(t, WithFencing(), WithClock(systemClock{}), WithTTL(400*time.Millisecond), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
		}
		var (
			mu        sync.Mutex
			last      int64
			decreases int
			entries   int
		)
		waitCtx := await.Context(t)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c := range cycles {
					lock, err := ls[w%lockers].Acquire(waitCtx, "lock.fenced")
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					entries++
					if lock.FencingToken() <= last {
						decreases++
					}
					last = lock.FencingToken()
					mu.Unlock()
					if (w+c)%37 == 0 {
						continue // crash: the lease must run out and be taken over
					}
					assert.NoError(t, lock.Release(ctx))
				}
			}()
		}
		await.Group(t, &wg, "the fenced workers")
		assert.Equal(t, workers*cycles, entries)
		assert.Zero(t, decreases, "a holder got a token no higher than its predecessor's")
	})
}

func mustInt(t *testing.T, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}

func TestFenceKeySharesTheLockKeysClusterSlot(t *testing.T) {
	cases := map[string]string{
		"lock.report":    "{lock.report}.fence",
		"{user42}.lock":  "{user42}.lock.fence",
		"a{b}c{d}":       "a{b}c{d}.fence",
		"odd{}key":       "{odd{}key}.fence",
		"open{only":      "{open{only}.fence",
		"lock:{}:{x}:y":  "{lock:{}:{x}:y}.fence",
		"{}{real}.lock2": "{{}{real}.lock2}.fence",
	}
	for key, want := range cases {
		assert.Equal(t, want, FenceKey(key), key)
		if hasHashTag(key) || !strings.Contains(key, "}") {
			assert.Equal(t, clusterSlot(key), clusterSlot(FenceKey(key)), "%q and its counter must share a slot", key)
		} else {
			// The documented limit: a '}' outside a hash tag cannot be
			// wrapped into one, so such keys need a hash tag of their own.
			assert.NotEqual(t, clusterSlot(key), clusterSlot(FenceKey(key)), "%q: the test's case list is wrong", key)
		}
	}
}

// clusterSlot is Redis Cluster's key slot: CRC16 (XMODEM) of the hash tag,
// or of the whole key when it has none, modulo 16384.
func clusterSlot(key string) uint16 {
	if open := indexByte(key, '{'); open >= 0 {
		if end := indexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
