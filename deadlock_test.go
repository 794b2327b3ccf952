package setnxlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A holder that crashes simply never releases. Its lease is respected until
// its expiry and taken over with GETSET (never DEL, H1) from then on.
func TestCrashedHolderIsRecoveredWithGetsetAfterExpiry(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		crashed, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		client := b.client(t)
		sent := record(client)
		waiter := b.lockerOn(t, client)

		b.clock.Advance(10*time.Second - time.Millisecond)
		_, err = waiter.TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "one millisecond before expiry the lease is live")

		b.clock.Advance(time.Millisecond)
		lock, err := waiter.TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "at the expiry instant the lease is over (the page: timestamp <= now)")
		assert.Equal(t, "SETNX GET SETNX GET GETSET", sent.names(), "taken over with GETSET, never DEL")
		assert.Equal(t, epoch.Add(20*time.Second), lock.ExpiresAt())

		require.ErrorIs(t, crashed.Release(ctx), ErrNotHeld)
		require.NoError(t, lock.Release(ctx))
	})
}

// The seed page and the classic libraries write bare timestamps in seconds,
// milliseconds or decimal seconds. Each is respected while live and
// recovered once expired.
func TestClassicValuesAreRespectedAndRecovered(t *testing.T) {
	at := epoch.Add(30 * time.Second) // every value below expires at this instant
	formats := map[string]string{
		"integer seconds (SETNX page)":        strconv.FormatInt(at.Unix(), 10),
		"integer ms (redis-lock, jedis-lock)": strconv.FormatInt(at.UnixMilli(), 10),
		"decimal seconds (redis-py)":          fmt.Sprintf("%d.000", at.Unix()),
		"decimal seconds, 2 digits":           fmt.Sprintf("%d.00", at.Unix()),
		"ms with owner suffix":                strconv.FormatInt(at.UnixMilli(), 10) + ":host-42:pid-7",
		"seconds with space suffix":           strconv.FormatInt(at.Unix(), 10) + " worker",
	}
	onEachBackend(t, func(t *testing.T, b *backend) {
		for name, value := range formats {
			t.Run(name, func(t *testing.T) {
				b.clock.Set(at.Add(-time.Millisecond))
				b.set(t, "lock.classic", value)
				l := b.locker(t)

				_, err := l.TryAcquire(ctx, "lock.classic")
				require.ErrorIs(t, err, ErrNotAcquired)
				assert.Equal(t, value, b.value(t, "lock.classic"))

				b.clock.Set(at)
				lock, err := l.TryAcquire(ctx, "lock.classic")
				require.NoError(t, err)
				require.NoError(t, lock.Release(ctx))
			})
		}
	})
}

// H7: a key that holds something other than a lock value is reported with
// ErrNotLockValue and left exactly as it was, however expired it might look.
func TestForeignValuesAreReportedAndLeftUntouched(t *testing.T) {
	garbage := []string{
		"", "hello", "-5", "+17", " 1732000000", "1732000000x", "17.", ".5",
		"1.2.3", "99999999999999999999", "123456789012345", "0x1F", "1e9", "NaN",
	}
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.clock.Set(epoch.Add(1000 * time.Hour)) // everything readable would be long expired
		client := b.client(t)
		sent := record(client)
		l := b.lockerOn(t, client)
		for _, value := range garbage {
			b.set(t, "lock.garbage", value)
			sent.reset()
			_, err := l.TryAcquire(ctx, "lock.garbage")
			require.ErrorIs(t, err, ErrNotLockValue, "value %q", value)
			require.Equal(t, value, b.value(t, "lock.garbage"))
			require.Equal(t, "SETNX GET", sent.names(), "value %q: nothing may be written", value)
		}

		require.NoError(t, b.raw.RPush(ctx, "lock.list", "a", "b").Err())
		_, err := l.TryAcquire(ctx, "lock.list")
		require.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, []string{"a", "b"}, b.raw.LRange(ctx, "lock.list", 0, -1).Val())

		_, err = l.Acquire(ctx, "lock.list")
		require.ErrorIs(t, err, ErrNotLockValue, "Acquire must not spin on a key it can never take")
	})
}

// H7 in the takeover step: garbage written between our GET and our GETSET is
// put back, and reported.
func TestGarbageFoundByGetsetIsPutBack(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		_, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		b.clock.Advance(time.Hour)

		client := b.client(t)
		hookCommand(client, "getset", func(ctx context.Context, _ redis.Cmder, send func() error) error {
			b.set(t, "lock.k", "not a lock")
			return send()
		})
		_, err = b.lockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, "not a lock", b.value(t, "lock.k"))
	})
}

// H2: a client that read the expired value, then lost the GETSET race to
// another, has overwritten the winner's value. It must put it back, so the
// key again names the winner's lease and the winner can release it.
func TestGetsetLoserRestoresTheWinnersValue(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.crashedHolder(t, "lock.k")
		loser := b.startRacer(t, "lock.k") // it has seen the expired value

		winner, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		winnersValue := b.value(t, "lock.k")

		loser.getset.pass()
		loser.restore.pass()
		require.ErrorIs(t, <-loser.done, ErrNotAcquired)
		assert.Equal(t, winnersValue, b.value(t, "lock.k"), "the loser must restore the winner's value")
		require.NoError(t, winner.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// H2 with two losers whose restores interleave badly: loser 1 checks the key
// while it holds loser 2's value (nothing to restore), then loser 2 restores
// loser 1's value. The winner must still be able to release.
func TestWinnerReleasesDespiteALosersLeftover(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.crashedHolder(t, "lock.k")
		loser1, loser2 := b.startRacer(t, "lock.k"), b.startRacer(t, "lock.k") // both have read the expired value

		winner, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		loser1.getset.pass()
		loser1.restore.wait(t) // loser 1 overwrote the winner's value
		loser2.getset.pass()
		loser2.restore.wait(t) // loser 2 overwrote loser 1's value
		loser1.restore.pass()  // finds loser 2's value: nothing of its own to restore
		require.ErrorIs(t, <-loser1.done, ErrNotAcquired)
		loser2.restore.pass() // puts loser 1's value back
		require.ErrorIs(t, <-loser2.done, ErrNotAcquired)

		leftover := b.value(t, "lock.k")
		require.NotEqual(t, winner.value, leftover, "the scenario must leave a loser's value behind")
		_, err = b.locker(t).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "the leftover keeps others out while the winner holds")
		require.NoError(t, winner.Release(ctx), "the winner recognises its race's leftover by the takeover tag")
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// The leftover tolerance ends with the holder's lease: after expiry the
// holder touches nothing but its exact value.
func TestLeftoverToleranceEndsWithTheLease(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		leftover := formatValue(b.clock.Now().Add(20*time.Second), newToken(), takeoverTag("1795000000"))
		b.set(t, "lock.k", leftover)

		b.clock.Advance(10 * time.Second)
		require.ErrorIs(t, holder.Release(ctx), ErrNotHeld)
		assert.Equal(t, leftover, b.value(t, "lock.k"))
	})
}

// H3 under clock skew: a client whose clock runs ahead may judge our live
// lease over and take it with GETSET. Its value names our value as the one
// it replaced, so it is never mistaken for a loser's leftover.
func TestATakeoverOfOurOwnValueIsNeverOurs(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		ours := b.value(t, "lock.k")

		aheadClock := NewManualClock(b.clock.Now().Add(10 * time.Second))
		skewed, err := b.locker(t, WithClock(aheadClock)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "the skewed client takes what it thinks expired")
		takenOver := b.value(t, "lock.k")
		require.Equal(t, takeoverTag(ours), tagOf(takenOver))

		require.ErrorIs(t, holder.Release(ctx), ErrNotHeld)
		assert.Equal(t, takenOver, b.value(t, "lock.k"))
		require.NoError(t, skewed.Release(ctx))
	})
}

// H2 for a holder that never raced: a stale racer read a crashed holder's
// value long ago and GETSETs only after the lock was taken over, released
// and taken again by SETNX. Its GETSET overwrites the new holder's live
// value; if that holder releases before the racer's restore lands, the
// release must still succeed.
func TestStaleRacerDoesNotKeepTheNextHolderFromReleasing(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.crashedHolder(t, "lock.k")
		stale := b.startRacer(t, "lock.k") // it has read the crashed holder's expired value

		recovered, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.NoError(t, recovered.Release(ctx))
		next, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		nextValue := b.value(t, "lock.k")

		stale.getset.pass()
		stale.restore.wait(t) // the stale GETSET has overwritten the next holder's value
		require.NotEqual(t, nextValue, b.value(t, "lock.k"))
		require.NoError(t, next.Release(ctx), "the next holder's release must succeed")

		stale.restore.pass()
		require.ErrorIs(t, <-stale.done, ErrNotAcquired)
		assert.Equal(t, "<missing>", b.value(t, "lock.k"), "the restore must not bring a released lock back")
	})
}

// H1/H2 under load: many clients race to recover the same expired lock; in
// every round exactly one wins, and it can release what it won.
func TestRaceToRecoverAnExpiredLockHasExactlyOneWinner(t *testing.T) {
	const racers, rounds = 16, 150
	onEachBackend(t, func(t *testing.T, b *backend) {
		lockers := make([]*Locker, racers)
		for i := range lockers {
			lockers[i] = b.locker(t)
		}
		for round := range rounds {
			_, err := lockers[0].TryAcquire(ctx, "lock.race") // a holder that crashes
			require.NoError(t, err)
			b.clock.Advance(10 * time.Second)

			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				winners []*Lock
				start   = make(chan struct{})
			)
			for _, l := range lockers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					lock, err := l.TryAcquire(ctx, "lock.race")
					if err != nil {
						assert.ErrorIs(t, err, ErrNotAcquired)
						return
					}
					mu.Lock()
					winners = append(winners, lock)
					mu.Unlock()
				}()
			}
			close(start)
			wg.Wait()
			require.Len(t, winners, 1, "round %d", round)
			require.NoError(t, winners[0].Release(ctx), "round %d: the winner must be able to release", round)
			require.Equal(t, "<missing>", b.value(t, "lock.race"), "round %d", round)
		}
	})
}
