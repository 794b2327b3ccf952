package setnxlock

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// A holder that crashes simply never releases. Its lease is respected until
// its expiry and taken over with GETSET (never DEL, H1) from then on, inside
// a watch on the expired value.
func TestCrashedHolderIsRecoveredWithGetsetAfterExpiry(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		crashed, err := b.classicLocker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		client := b.client(t)
		sent := record(client)
		waiter := b.classicLockerOn(t, client)

		b.clock.Advance(10*time.Second - time.Millisecond)
		_, err = waiter.TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "one millisecond before expiry the lease is live")

		b.clock.Advance(time.Millisecond)
		lock, err := waiter.TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "at the expiry instant the lease is over (the page: timestamp <= now)")
		assert.Equal(t, "SETNX GET SETNX GET WATCH GET MULTI GETSET PEXPIRE EXEC", sent.names(), "taken over with a watched GETSET, never DEL")
		assert.Equal(t, b.start.Add(20*time.Second), lock.ExpiresAt())

		require.ErrorIs(t, crashed.Release(ctx), ErrNotHeld)
		require.NoError(t, lock.Release(ctx))
	})
}

// The seed page and the classic libraries write bare timestamps in seconds,
// milliseconds or decimal seconds. Each is respected while live and
// recovered once expired. A whole number of seconds T is held through the
// end of second T (issue 11, finding 12: kvz/cronlock releases by writing
// T and, moments later, an EXPIREAT T that deletes whatever the key holds);
// the other formats end exactly at the instant they state.
func TestClassicValuesAreRespectedAndRecovered(t *testing.T) {
	at := clockStart().Add(30 * time.Second) // every value below states this instant
	formats := map[string]struct {
		value       string
		heldThrough time.Duration // after at
	}{
		"integer seconds (SETNX page)":        {strconv.FormatInt(at.Unix(), 10), time.Second},
		"integer ms (redis-lock, jedis-lock)": {strconv.FormatInt(at.UnixMilli(), 10), 0},
		"decimal seconds (redis-py)":          {fmt.Sprintf("%d.000", at.Unix()), 0},
		"decimal seconds, 2 digits":           {fmt.Sprintf("%d.00", at.Unix()), 0},
		"ms with owner suffix":                {strconv.FormatInt(at.UnixMilli(), 10) + ":host-42:pid-7", 0},
		"seconds with space suffix":           {strconv.FormatInt(at.Unix(), 10) + " worker", time.Second},
	}
	onEachBackend(t, func(t *testing.T, b *backend) {
		for name, f := range formats {
			t.Run(name, func(t *testing.T) {
				ends := at.Add(f.heldThrough)
				b.clock.Set(ends.Add(-time.Millisecond))
				b.set(t, "lock.classic", f.value)
				l := b.locker(t)

				_, err := l.TryAcquire(ctx, "lock.classic")
				require.ErrorIs(t, err, ErrNotAcquired)
				assert.Equal(t, f.value, b.value(t, "lock.classic"))

				b.clock.Set(ends)
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
		"", "hello", "-5", "+17", " 900000000", "900000000x", "17.", ".5",
		"1.2.3", "99999999999999999999", "123456789012345", "0x1F", "1e9", "NaN",
	}
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.clock.Set(b.start.Add(1000 * time.Hour)) // everything readable would be long expired
		client := b.client(t)
		sent := record(client)
		l := b.classicLockerOn(t, client)
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

		_, err = l.Acquire(await.Context(t), "lock.list")
		require.ErrorIs(t, err, ErrNotLockValue, "Acquire must not spin on a key it can never take")
	})
}

// H7 during a takeover: garbage written between our GET and the takeover is
// seen inside the watch; nothing is written and the garbage is reported.
func TestGarbageWrittenDuringATakeoverIsLeftAlone(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.classicCrashedHolder(t, "lock.k")
		client := b.client(t)
		sent := record(client)
		hookCommand(client, "watch", func(send func() error) error {
			b.set(t, "lock.k", "not a lock")
			return send()
		})
		_, err := b.classicLockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, "not a lock", b.value(t, "lock.k"))
		assert.Equal(t, "SETNX GET WATCH GET UNWATCH SETNX GET", sent.names(), "nothing may be written")
	})
}

// H1/H2: a client that read the expired value, then lost the race to take
// it over, must write nothing: not even for a moment, and not when it can no
// longer see its replies (a bare GETSET loser could only restore the winner's
// value if it saw what GETSET returned). Its value would expire before the
// winner's lease and let a third client in.
func TestATakeoverLoserWritesNothing(t *testing.T) {
	for _, repliesLost := range []bool{false, true} {
		t.Run(fmt.Sprintf("replies lost %v", repliesLost), func(t *testing.T) {
			onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
				b.crashedHolderOf(t, "lock.k", b.locker(t, p.opt))
				loser := b.startRacer(t, "lock.k", p) // it has seen the expired value

				b.clock.Advance(5 * time.Second) // the winner comes later, so its lease ends later
				winner, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
				require.NoError(t, err)
				winnersValue := b.value(t, "lock.k")

				if repliesLost {
					loser.lost.arm()
				}
				loser.sawExpired.pass()
				err = await.Recv(t, loser.done, "the racer's TryAcquire")
				require.Error(t, err)
				if !repliesLost {
					require.ErrorIs(t, err, ErrNotAcquired)
				}
				assert.Equal(t, winnersValue, b.value(t, "lock.k"), "the loser overwrote the winner")

				b.clock.Set(winner.ExpiresAt().Add(-time.Millisecond))
				_, err = b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
				require.ErrorIs(t, err, ErrNotAcquired, "a third client got in during the winner's lease")
				require.NoError(t, winner.Release(ctx))
				assert.Equal(t, "<missing>", b.value(t, "lock.k"))
			})
		})
	}
}

// A server or proxy that accepts WATCH and ignores it breaks the takeover:
// the GETSET runs over the winner's live value. The page's check on the old
// value catches it; the loser puts the winner's value back as a courtesy and
// reports ErrWatchIgnored, which Acquire does not retry.
func TestAServerThatIgnoresWatchIsDetected(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.classicCrashedHolder(t, "lock.k")
		client := b.client(t)
		client.AddHook(watchIgnored{})
		checked := gateAfter(t, client, "get", 2) // the GET inside the would-be watch
		loserDone := make(chan error, 1)
		go func() { _, err := b.classicLockerOn(t, client).TryAcquire(ctx, "lock.k"); loserDone <- err }()
		checked.wait(t)

		winner, err := b.classicLocker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		winnersValue := b.value(t, "lock.k")
		checked.pass()

		require.ErrorIs(t, await.Recv(t, loserDone, "the loser's TryAcquire"), ErrWatchIgnored)
		assert.Equal(t, winnersValue, b.value(t, "lock.k"), "the loser must put the winner's value back")
		require.NoError(t, winner.Release(ctx))
	})
}

// H3 under clock skew: a client whose clock runs ahead may judge our live
// lease over and take it. Our late Release then leaves its value alone.
// (Skew beyond the margin is outside the guarantees: while our lease is
// live by our clock, Release takes the key no longer ours for its own
// earlier release, H5, and reports nil.)
func TestATakeoverByASkewedClientIsLeftAlone(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, err := b.locker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)

		aheadClock := NewManualClock(b.clock.Now().Add(10 * time.Second))
		skewed, err := b.locker(t, WithClock(aheadClock)).TryAcquire(ctx, "lock.k")
		require.NoError(t, err, "the skewed client takes what it thinks expired")
		takenOver := b.value(t, "lock.k")

		require.NoError(t, holder.Release(ctx))
		assert.Equal(t, takenOver, b.value(t, "lock.k"))
		require.NoError(t, skewed.Release(ctx))
	})
}

// A stale racer read a crashed holder's value long ago and acts only after
// the lock was taken over, released and taken again by SETNX. Whatever
// becomes of its replies, the next holder keeps its lock and can release it.
func TestAStaleRacerLeavesTheNextHolderAlone(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		b.crashedHolderOf(t, "lock.k", b.locker(t, p.opt))
		stale := b.startRacer(t, "lock.k", p) // it has read the crashed holder's expired value

		recovered, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.NoError(t, recovered.Release(ctx))
		next, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		nextValue := b.value(t, "lock.k")

		stale.lost.arm()
		stale.sawExpired.pass()
		require.Error(t, await.Recv(t, stale.done, "the stale racer's TryAcquire"))
		assert.Equal(t, nextValue, b.value(t, "lock.k"))
		require.NoError(t, next.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// H3 when a Release is retried: the first attempt's DEL was applied but its
// reply lost, and another client took the free key. The retry must not
// delete the new holder's lock; it reports success, since while our lease
// was live only our own DEL can have removed our value.
func TestARetriedReleaseLeavesTheNextHolderAlone(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		holder, err := b.classicLockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		loseReply(client, "exec")

		err = holder.Release(ctx)
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrNotHeld, "the outcome is unknown to the holder")
		next, err := b.classicLocker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		nextValue := b.value(t, "lock.k")

		require.NoError(t, holder.Release(ctx))
		assert.Equal(t, nextValue, b.value(t, "lock.k"))
		require.ErrorIs(t, holder.Release(ctx), ErrNotHeld, "released is released")
		require.NoError(t, next.Release(ctx))
	})
}

// H3 when the holder stalls inside Release until its lease is over and the
// lock has been taken over: it must not delete the new holder's lock.
func TestAReleaseStalledPastItsLeaseLeavesTheTakerAlone(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		holder, err := b.classicLockerOn(t, client).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		b.clock.Set(holder.ExpiresAt().Add(-time.Millisecond))
		beforeWatch := gateBefore(t, client, "watch", 1)
		released := make(chan error, 1)
		go func() { released <- holder.Release(ctx) }()
		beforeWatch.wait(t) // Release judged the lease live, then stalled

		b.clock.Set(holder.ExpiresAt()) // ExpiresAt must not wait for the stalled Release
		taker, err := b.classicLocker(t).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		takersValue := b.value(t, "lock.k")
		beforeWatch.pass()

		require.ErrorIs(t, await.Recv(t, released, "the stalled Release"), ErrNotHeld)
		assert.Equal(t, takersValue, b.value(t, "lock.k"))
		require.NoError(t, taker.Release(ctx))
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
					<-start // bounded: closed below once every racer is started
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
			await.Group(t, &wg, "round %d's racers", round)
			require.Len(t, winners, 1, "round %d", round)
			require.NoError(t, winners[0].Release(ctx), "round %d: the winner must be able to release", round)
			require.Equal(t, "<missing>", b.value(t, "lock.race"), "round %d", round)
		}
	})
}
