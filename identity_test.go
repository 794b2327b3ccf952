package setnxlock

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Who holds a lock (identity.go): the identity follows the owner token in
// the value, for readers; ownership reads only the token.

// A lease's value says who holds it, on every path: the acquisition, a
// Refresh and the Release all write and recognise "<ms>:<token>|<identity>";
// Status reports the identity, and a classic reader sees the number.
func TestALeaseSaysWhoHoldsIt(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt, WithIdentity("billing worker 7@web-1"))
		lock, err := l.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		value := b.value(t, "lock.k")
		assert.Equal(t, formatValue(lock.ExpiresAt(), lock.token, "billing worker 7@web-1"), value)
		assert.Equal(t, strconv.FormatInt(lock.ExpiresAt().UnixMilli(), 10), strings.SplitN(value, ":", 2)[0], "a classic reader's leading number")

		status, err := l.Status(ctx, "lock.k")
		require.NoError(t, err)
		assert.Equal(t, "billing worker 7@web-1", status.Identity)
		assert.Equal(t, TokenFormat, status.Format)
		assert.True(t, status.Held)

		b.clock.Advance(time.Second)
		require.NoError(t, lock.Refresh(ctx, 20*time.Second))
		assert.Equal(t, formatValue(b.clock.Now().Add(20*time.Second), lock.token, "billing worker 7@web-1"), b.value(t, "lock.k"), "the renewal says it too")
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))

		// The default: the host name and process id; "" writes none.
		lock, err = b.locker(t, p.opt).TryAcquire(ctx, "lock.default")
		require.NoError(t, err)
		assert.Equal(t, formatValue(lock.ExpiresAt(), lock.token, DefaultIdentity()), b.value(t, "lock.default"))
		require.NoError(t, lock.Release(ctx))
		lock, err = b.locker(t, p.opt, WithIdentity("")).TryAcquire(ctx, "lock.none")
		require.NoError(t, err)
		assert.Equal(t, formatValue(lock.ExpiresAt(), lock.token, ""), b.value(t, "lock.none"))
		require.NoError(t, lock.Release(ctx))
	})
}

func TestTheDefaultIdentityIsTheHostAndProcess(t *testing.T) {
	id := DefaultIdentity()
	require.NoError(t, validIdentity(id))
	host, _ := os.Hostname()
	assert.Equal(t, hostIdentity(host, os.Getpid()), id)
	for host, want := range map[string]string{
		"web-1.example.com":      "web-1.example.com:42",
		"":                       "unknown:42",
		"odd|host\tname\xff":     "odd_host_name_:42",
		strings.Repeat("h", 300): strings.Repeat("h", maxIdentity-3) + ":42",
		strings.Repeat("é", 200): strings.Repeat("é", (maxIdentity-3)/2) + ":42", // not cut inside a rune
	} {
		got := hostIdentity(host, 42)
		assert.Equal(t, want, got, "host %q", host)
		assert.NoError(t, validIdentity(got), "host %q", host)
	}
}

// The bare timestamp formats stay bare: their readers do arithmetic on the
// whole value.
func TestTheBareFormatsStayBare(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		for _, format := range []Format{UnixMillis, UnixSeconds, FloatSeconds} {
			key := "lock." + format.String()
			l := b.locker(t, p.opt, WithFormat(format), WithIdentity("web-1:42"))
			lock, err := l.TryAcquire(ctx, key)
			require.NoError(t, err)
			value := b.value(t, key)
			assert.NotContains(t, value, "web-1", format)
			_, err = strconv.ParseFloat(value, 64)
			require.NoError(t, err, "%v writes a bare number: %q", format, value)
			status, err := l.Status(ctx, key)
			require.NoError(t, err)
			assert.Empty(t, status.Identity)
			require.NoError(t, lock.Refresh(ctx, time.Minute))
			_, err = strconv.ParseFloat(b.value(t, key), 64)
			require.NoError(t, err, "%v renews with a bare number", format)
			require.NoError(t, lock.Release(ctx))
		}
	})
}

// A value without an identity part (an older version's, a foreign
// client's) reads as before: held while live, taken over once expired.
func TestAValueWithoutIdentityReadsAsBefore(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		ends := b.clock.Now().Add(time.Minute)
		ms := strconv.FormatInt(ends.UnixMilli(), 10)
		readByTheirNumber(t, b, b.locker(t, p.opt), ends, formatValue(ends, "OLDERVERSIONTOKEN", ""), ms+":foreign:suffix", ms)
	})
}

// A value whose identity part is not an identity is read by its leading
// number, never ErrNotLockValue; its identity is ignored.
func TestAMalformedIdentityPartIsReadByItsNumber(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		ends := b.clock.Now().Add(time.Minute)
		var values []string
		for _, identity := range []string{"bell\a", "tab\there", strings.Repeat("x", maxIdentity+1), "a|b", "\xff\xfe"} {
			values = append(values, formatValue(ends, "FOREIGNTOKEN", "")+"|"+identity)
		}
		readByTheirNumber(t, b, b.locker(t, p.opt), ends, values...)
	})
}

// readByTheirNumber sets keys to values that each state ends and no
// identity l reads, and checks that l reads them so: Status says held
// until ends, with no identity; TryAcquire is refused while they are
// live, and takes them over once ended.
func readByTheirNumber(t *testing.T, b *backend, l *Locker, ends time.Time, values ...string) {
	t.Helper()
	for i, value := range values {
		key := "lock." + strconv.Itoa(i)
		b.set(t, key, value)
		status, err := l.Status(ctx, key)
		require.NoError(t, err)
		assert.False(t, status.Foreign, "%q", value)
		assert.True(t, status.Held, "%q", value)
		assert.True(t, ends.Truncate(time.Millisecond).Equal(status.ExpiresAt), "%q: %v", value, status.ExpiresAt)
		assert.Empty(t, status.Identity, "%q", value)
		_, err = l.TryAcquire(ctx, key)
		require.ErrorIs(t, err, ErrNotAcquired, "%q", value)
		require.NotErrorIs(t, err, ErrNotLockValue, "%q", value)
	}
	b.clock.Set(ends.Add(time.Millisecond))
	for i, value := range values {
		lock, err := l.TryAcquire(ctx, "lock."+strconv.Itoa(i))
		require.NoError(t, err, "%q taken over once ended", value)
		require.NoError(t, lock.Release(ctx))
	}
}

// An identity cannot make a value carry another token: a successor whose
// identity part ends like ":<our token>" (as an older version's suffix
// check would have read it) is not ours to release or refresh (H3).
func TestAnIdentityCannotForgeAToken(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		lock, err := b.locker(t, p.opt).TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		b.clock.Set(lock.ExpiresAt().Add(-time.Second))
		successor := formatValue(b.clock.Now().Add(time.Minute), "SUCCESSORTOKEN", "x:"+lock.token)
		b.set(t, "lock.k", successor) // as if our lease had been taken over
		require.ErrorIs(t, lock.Refresh(ctx, time.Minute), ErrNotHeld)
		assert.Equal(t, successor, b.value(t, "lock.k"), "the refresh left the successor alone")
		require.ErrorIs(t, lock.Release(ctx), ErrNotHeld)
		assert.Equal(t, successor, b.value(t, "lock.k"), "the release left the successor alone")
	})
}

// A handoff between Lockers of different identities: the provisional
// value carries the waiter's token and no identity (the releaser does not
// know it); the waiter's claim recognises it and writes the waiter's own
// identity; its Refresh and Release recognise that value.
func TestAHandedLockSaysItsNewHolderOnceClaimed(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, path Option) {
		h := queueHeardWait(t, b, path, WithIdentity("waiter@web-2"))
		assert.Equal(t, DefaultIdentity(), identityOf(b.value(t, "lock.k")), "the holder's identity")
		lock := h.handedOver(t)
		provisional := b.value(t, "lock.k")
		assert.Equal(t, entryToken(h.entry), tokenOf(provisional))
		assert.Empty(t, identityOf(provisional), "a provisional value states no identity: %q", provisional)

		h.claim.pass()
		claimReturned(t, lock)
		require.NoError(t, lock.Err())
		assert.Equal(t, formatValue(lock.ExpiresAt(), entryToken(h.entry), "waiter@web-2"), b.value(t, "lock.k"), "the claim wrote the waiter's identity")
		b.clock.Advance(time.Second)
		require.NoError(t, lock.Refresh(ctx, time.Minute))
		assert.Equal(t, "waiter@web-2", identityOf(b.value(t, "lock.k")))
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, "<missing>", b.value(t, "lock.k"))
	})
}

// A queued attempt (queued.lua, the command transport) claims a value
// handed to its wait whatever identity follows the token, and refuses a
// value whose identity merely mentions its token.
func TestAQueuedClaimIsExactOnTheToken(t *testing.T) {
	onEachQueueingPath(t, func(t *testing.T, b *backend, queueing Option) {
		l := b.locker(t, queueing, WithIdentity("mine"))
		entry := l.newQueueEntry("lock.k")
		ours := l.attemptStamp(b.clock.Now(), entry.token)
		enqueueOrClaim := func() (c claimOutcome) {
			require.NoError(t, l.onPath(func(p path) (err error) {
				c, err = p.queue().enqueueOrClaim(ctx, "lock.k", ours, entry)
				return err
			}))
			return c
		}

		forged := formatValue(b.clock.Now().Add(-time.Second), "OTHERTOKEN", "x:"+entry.token)
		b.set(t, "lock.k", forged)
		c := enqueueOrClaim()
		assert.False(t, c.created, "a value that only mentions our token is not ours")
		assert.Equal(t, forged, b.value(t, "lock.k"))
		require.NoError(t, l.onPath(func(p path) error { return p.queue().leave(ctx, entry) }))
		assert.Equal(t, forged, b.value(t, "lock.k"), "nor is it ours to hand on when we leave")

		handed := formatValue(b.clock.Now().Add(-time.Second), entry.token, "an older lease of ours")
		b.set(t, "lock.k", handed)
		c = enqueueOrClaim()
		assert.True(t, c.created, "a value carrying our token is ours, whatever identity follows it")
		assert.Equal(t, ours.value, b.value(t, "lock.k"))
	})
}

// The scripts read a value's token and end exactly as Go does
// (lua/value.lua and tokenOf).
func TestTheScriptsReadTokensAsGoDoes(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		ms := strconv.FormatInt(b.clock.Now().UnixMilli(), 10)
		for _, value := range []string{
			ms + ":TOKEN", ms + ":TOKEN|web-1:42", ms + ".0:TOKEN", ms + ":TOKEN|",
			ms + ":TOKEN|a:b|c", ms + ":|id", ms, ms + ".5", ":TOKEN", "1:a:b", "1|x:TOKEN",
		} {
			reply, err := b.raw.Eval(ctx, valueLua+"local t, e = tokenOf(ARGV[1]) return {t or false, e or false}", nil, value).Slice()
			require.NoError(t, err, value)
			token, _ := reply[0].(string)
			end, _ := reply[1].(string)
			assert.Equal(t, tokenOf(value), token, "the token of %q", value)
			if number, _, ok := strings.Cut(value, ":"); ok {
				assert.Equal(t, number, end, "the end of %q", value)
			}
		}
	})
}

// A bad identity is ErrInvalidArgument from New, with nothing sent.
func TestABadIdentityIsRejectedWithNothingWritten(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		sent := record(client)
		for _, identity := range []string{"bell\a", "line\nbreak", "nul\x00", "del\x7f", "c1\u0085", strings.Repeat("é", maxIdentity/2+1), "a|b", "\xff"} {
			l, err := New(client, WithIdentity(identity))
			require.ErrorIs(t, err, ErrInvalidArgument, "%q", identity)
			assert.Nil(t, l)
		}
		assert.Empty(t, sent.names(), "nothing sent")
		assert.Zero(t, b.raw.DBSize(ctx).Val(), "nothing written")
		_, err := New(client, WithIdentity(strings.Repeat("x", maxIdentity)))
		require.NoError(t, err, "256 bytes is the longest")
	})
}

// Leader reports the leader's identity, from its lease's value.
func TestLeaderSaysWhoLeads(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		lead, err := b.locker(t, p.opt, WithIdentity("scheduler@web-3")).Campaign(ctx, "jobs", "web-3:8080")
		require.NoError(t, err)
		leader, err := b.locker(t, p.opt).Leader(ctx, "jobs")
		require.NoError(t, err)
		assert.Equal(t, "scheduler@web-3", leader.Identity)
		assert.Equal(t, "web-3:8080", leader.Value)
		require.NoError(t, lead.Resign(ctx))
	})
}

// restamp keeps the identity of the value it moves forward.
func TestARestampedClaimKeepsItsIdentity(t *testing.T) {
	now := clockStart()
	ours := TokenFormat.newStamp(now, time.Second, "TOKEN", "web-1:42")
	ours.queuedWait = "TOKEN"
	moved, err := restamp(formatValue(now.Add(time.Minute), "TOKEN", ""), ours)
	require.NoError(t, err)
	assert.Equal(t, formatValue(now.Add(time.Minute+time.Millisecond), "TOKEN", "web-1:42"), moved.value)
}
