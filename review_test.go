package setnxlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
)

// Review of issue 23 (R1): X2's user, refused one key's queue, whose
// queued wait finds a crashed holder's expired lease there. The queued
// attempt is refused the queue and goes on unqueued (claimOn); the lease
// it found is over, so it takes it over. The takeover must take the
// lock: the attempt no longer queues, so its write must neither carry the
// entry's token nor take the entry off a queue the user is refused (that
// ZREM aborts the whole transaction, NOPERM).
func TestAWaitRefusedTheQueueTakesOverACrashedHoldersLease(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		l, _ := queueRefusedWaiter(t, b, path)
		b.set(t, "lock.k", formatValue(b.start.Add(-time.Minute), "crashed", "")) // a lease that ended a minute ago
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lock, err := l.Acquire(waitCtx, "lock.k")
		require.NoError(t, err, "the wait did not take over a lease that was over")
		require.NoError(t, lock.Release(ctx))
	})
}

// Review of issue 23 (R2): X1 through Refresh. "Hand on only the exact
// provisional value" (protocol.go) holds only while no other write of the
// wait can state the provisional value's end; the claim is kept from it
// (claimable, restamp), but the holder's Refresh is not. A command-path
// releaser hands the key to a waiter with P = (now+claimWindow):<token>,
// and nobody hears it; the waiter's poll claims the key (a value that is
// not P), and the holder, as its work needs, refreshes its lease to
// claimWindow: by a clock that agrees with the releaser's, that value is P
// itself. The releaser's hand-on of its unheard handoff then recognises P
// by equality and takes the holder's live lease (here: deletes it, and a
// second client takes the key while the first still holds).
func TestAnUnheardHandoffIsNotHandedOnAfterTheHolderRefreshedToItsValue(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		anUnheardHandoffClaimedByAPoll(t, b, queueingPaths[1].opt, []Option{path}, func(lock *Lock, provisional string) {
			require.NotEqual(t, provisional, lock.value, "the claim wrote a value of its own")
			require.NoError(t, lock.Refresh(ctx, claimWindow))
			// The schedule: by the releaser's clock, the refresh states the
			// provisional value's end; it is a lease, so not that value.
			handed, err := parseExpiry(provisional)
			require.NoError(t, err)
			refreshed, err := parseExpiry(lock.value)
			require.NoError(t, err)
			require.InDelta(t, handed.UnixMilli(), refreshed.UnixMilli(), 1, "the refresh aims at the provisional value's end")
			require.NotEqual(t, provisional, lock.value, "no lease equals a provisional value (provisionalMark)")
			require.NoError(t, lock.Err(), "the holder still holds")
		})
	})
}

// Review of issue 23 (R3): the transports part on a first entry that is
// not one (parseEntry; a foreign write to the queue). handon.lua drops it
// and hands the key to the next waiter in line; the command transport's
// hand-on (handOnce) drops it, frees the key and tells nobody in the
// queue, so a client that comes first takes the key past the queued
// waiter (first come, first served; one protocol, two transports).
func TestAMalformedFirstEntryIsDroppedAndTheNextWaiterServed(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		holder, err := b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		require.NoError(t, b.raw.ZAdd(ctx, waitersKey("lock.k"), redis.Z{Score: 1, Member: "not-an-entry"}).Err())
		waiter := acquireInBackground(t, b.locker(t, path), "lock.k")
		entries := b.queued(t, "lock.k", 2)
		require.Equal(t, "not-an-entry", entries[0], "the schedule: the malformed entry is first in line")

		require.NoError(t, holder.Release(ctx))
		_, err = b.locker(t, path).TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired, "a newcomer took the key past the queued waiter: %s", b.value(t, "lock.k"))
		lock := await.Recv(t, waiter, "the queued waiter's Acquire")
		require.NotNil(t, lock)
		require.NoError(t, lock.Release(ctx))
	})
}

// Review of issue 23 (R4): R1 without an ACL. A wait of a Locker that
// listens for handoffs queues at once; its key's queue holds a foreign
// string (WRONGTYPE), so its queued attempt goes on unqueued, finds a
// crashed holder's lease over and takes it over, still with the entry's
// token and a ZREM of the queue in the takeover's MULTI. The ZREM fails
// at EXEC (WRONGTYPE is no abort): the GETSET and PEXPIRE ran, and the
// key holds the wait's lease, but the takeover reports the error and
// Acquire gives up on it (a reply error: not retryable). The wait's leave
// then deletes the lease it wrote (it carries the entry's token), so the
// key is free again; but the wait failed where it should have won.
func TestAWaitWhoseQueueIsForeignTakesOverACrashedHoldersLease(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		l := b.locker(t, path)
		_, err := b.locker(t, path).TryAcquire(ctx, "lock.other")
		require.NoError(t, err)
		otherCtx, cancel := context.WithCancel(await.Context(t))
		t.Cleanup(cancel)
		go func() { _, _ = l.Acquire(otherCtx, "lock.other") }()
		b.queued(t, "lock.other", 1) // l listens for handoffs: its next wait queues at once

		b.set(t, waitersKey("lock.k"), "not a queue")
		b.set(t, "lock.k", formatValue(b.start.Add(-time.Minute), "crashed", "")) // a lease that ended a minute ago
		waitCtx, stop := context.WithTimeout(ctx, 5*time.Second)
		defer stop()
		lock, err := l.Acquire(waitCtx, "lock.k")
		require.NoError(t, err, "the wait did not take over a lease that was over; the key holds %s", b.value(t, "lock.k"))
		require.Equal(t, lock.value, b.value(t, "lock.k"))
		require.NoError(t, lock.Release(ctx))
	})
}
