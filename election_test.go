package setnxlock

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// Leader election scenarios, on every path and backend. The candidates are
// Lockers on clients of their own, as separate services would be;
// election_process_test.go runs them as processes and kills them.

// campaign is Campaign under a test's deadline, failing the test on error.
func campaign(t *testing.T, l *Locker, name, value string) *Leadership {
	t.Helper()
	lead, err := l.Campaign(await.Context(t), name, value)
	require.NoError(t, err)
	return lead
}

// campaignInBackground starts a Campaign that the test collects later.
func campaignInBackground(t *testing.T, l *Locker, name, value string) <-chan *Leadership {
	t.Helper()
	won := make(chan *Leadership, 1)
	ctx := await.Context(t)
	go func() {
		lead, err := l.Campaign(ctx, name, value)
		if err != nil {
			t.Errorf("Campaign(%q, %q): %v", name, value, err)
		}
		won <- lead
	}()
	return won
}

func TestACandidateLeadsUntilItResignsAndTheNextOneFollows(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		alice, bob, reader := b.locker(t, p.opt), b.locker(t, p.opt), b.locker(t, p.opt)

		first := campaign(t, alice, "jobs", "alice:8080")
		assert.Equal(t, int64(1), first.Term())
		assert.Equal(t, "alice:8080", first.Value())
		leader, err := reader.Leader(ctx, "jobs")
		require.NoError(t, err)
		assertLeader(t, Leader{Value: "alice:8080", Term: 1, ExpiresAt: first.ExpiresAt()}, leader)

		next := campaignInBackground(t, bob, "jobs", "bob:8080")
		select {
		case <-next:
			t.Fatal("a second candidate won while the first still led")
		case <-time.After(50 * time.Millisecond):
		}

		require.NoError(t, first.Resign(ctx))
		await.Recv(t, first.Done(), "Done closed by Resign")
		assert.NoError(t, first.Err(), "a resigned leadership was not lost")
		second := await.Recv(t, next, "the waiting candidate to lead once the first resigned")
		require.NotNil(t, second)
		assert.Greater(t, second.Term(), first.Term(), "terms strictly increase")
		require.NoError(t, first.Resign(ctx), "a second Resign is nil")

		leader, err = reader.Leader(ctx, "jobs")
		require.NoError(t, err)
		assertLeader(t, Leader{Value: "bob:8080", Term: second.Term(), ExpiresAt: second.ExpiresAt()}, leader)

		require.NoError(t, second.Resign(ctx))
		_, err = reader.Leader(ctx, "jobs")
		assert.ErrorIs(t, err, ErrNoLeader, "nobody leads after the last leader resigned")
		assert.Equal(t, "<missing>", b.value(t, ElectionKey("jobs")))
		assert.Equal(t, "<missing>", b.value(t, LeaderKey("jobs")))
		assert.Equal(t, strconv.FormatInt(second.Term(), 10), b.value(t, FenceKey(ElectionKey("jobs"))), "the term counter stays")
	})
}

// A leader that stops renewing (its process stalled or died) leads no
// longer once its lease is over: Leader says so, the next candidate takes
// over with a higher term, and the stalled leader's late Resign leaves the
// new leader's keys alone.
func TestALeaderWhoseLeaseRunsOutIsNoLeaderAndIsSucceeded(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		stalled, next, reader := b.locker(t, p.opt), b.locker(t, p.opt), b.locker(t, p.opt)
		old := campaign(t, stalled, "jobs", "old")
		ends := old.ExpiresAt()

		// The clock jumps past the renewal and the end at once: the keeper
		// finds the lease over before it can renew it.
		b.clock.Set(ends)
		_, err := reader.Leader(ctx, "jobs")
		assert.ErrorIs(t, err, ErrNoLeader, "a lease that has run out is no leader")
		await.Recv(t, old.Done(), "the stalled leader to see its lease run out")
		assert.ErrorIs(t, old.Err(), ErrNotHeld)
		work := old.Context(ctx)
		await.Recv(t, work.Done(), "a context of the lost leadership to be cancelled")
		assert.ErrorIs(t, context.Cause(work), ErrNotHeld)

		successor := campaign(t, next, "jobs", "new")
		assert.Greater(t, successor.Term(), old.Term())
		lockValue, record := b.value(t, ElectionKey("jobs")), b.value(t, LeaderKey("jobs"))

		require.NoError(t, old.Resign(ctx), "Resign after a loss has nothing left to do")
		assert.ErrorIs(t, old.Err(), ErrNotHeld, "Err keeps reporting the loss")
		assert.Equal(t, lockValue, b.value(t, ElectionKey("jobs")), "the old leader's Resign left the new lock alone")
		assert.Equal(t, record, b.value(t, LeaderKey("jobs")), "and the new record")
		leader, err := reader.Leader(ctx, "jobs")
		require.NoError(t, err)
		assert.Equal(t, "new", leader.Value)
		require.NoError(t, successor.Resign(ctx))
	})
}

// An operator breaks the leader's lock: its next renewal finds the key no
// longer ours and the leadership reports its loss.
func TestALeaderSeesItsLossAtItsNextRenewal(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		leader, operator := b.locker(t), b.locker(t)
		lead := campaign(t, leader, "jobs", "a")
		work := lead.Context(ctx)
		_, err := operator.ForceRelease(ctx, ElectionKey("jobs"))
		require.NoError(t, err)

		b.clock.Advance(leader.TTL() / 3) // the renewal is due
		await.Recv(t, lead.Done(), "the leader to see its loss at its renewal")
		assert.ErrorIs(t, lead.Err(), ErrNotHeld)
		await.Recv(t, work.Done(), "the leader's work context to be cancelled")
		assert.ErrorIs(t, context.Cause(work), ErrNotHeld)
		require.NoError(t, lead.Resign(ctx))
	})
}

// Renewals keep a leadership however the Locker was configured: without
// WithAutoRefresh, and in a bare-timestamp format.
func TestALeadershipRenewsItselfWhateverTheLockersOptions(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t, WithFormat(UnixSeconds))
		lead := campaign(t, l, "jobs", "a")
		for range 5 {
			ends := lead.ExpiresAt()
			b.clock.Advance(l.TTL() / 3)
			require.Eventually(t, func() bool { return lead.ExpiresAt().After(ends) }, await.Timeout, time.Millisecond,
				"the leadership to renew at a third of its TTL")
		}
		assert.NoError(t, lead.Err())
		_, err := l.Leader(ctx, "jobs")
		require.NoError(t, err)
		require.NoError(t, lead.Resign(ctx))
	})
}

// A Campaign cancelled while it waits, or right after it won the lock and
// before it published, leaves nothing of it in Redis.
func TestACancelledCampaignLeavesNothingBehind(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		holder, waiter := b.locker(t, p.opt), b.locker(t, p.opt)
		lead := campaign(t, holder, "jobs", "holder")
		before := keysOf(t, b, FenceKey(ElectionKey("jobs")))

		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, err := waiter.Campaign(waitCtx, "jobs", "waiter")
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, before, keysOf(t, b, FenceKey(ElectionKey("jobs"))), "a campaign that gave up left nothing")
		require.NoError(t, lead.Resign(ctx))

		// Cancelled the moment it wins the lock, before it publishes.
		winCtx, cancelWin := context.WithCancel(ctx)
		defer cancelWin()
		winner := b.locker(t, p.opt, WithObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventAcquired {
				cancelWin()
			}
		})))
		_, err = winner.Campaign(winCtx, "jobs", "winner")
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, "<missing>", b.value(t, ElectionKey("jobs")), "the lock it won is released")
		assert.Equal(t, "<missing>", b.value(t, LeaderKey("jobs")), "no record of it")
		_, err = holder.Leader(ctx, "jobs")
		assert.ErrorIs(t, err, ErrNoLeader)
	})
}

// keysOf lists the keys on the backend with their values (strings) or
// types, to compare before and after; a counter named in moving is listed
// without its value (a refused attempt on the command paths draws a number,
// and terms may skip it).
func keysOf(t *testing.T, b *backend, moving ...string) map[string]string {
	t.Helper()
	keys, err := b.raw.Keys(ctx, "*").Result()
	require.NoError(t, err)
	out := map[string]string{}
	for _, k := range keys {
		typ := b.raw.Type(ctx, k).Val()
		if typ == "string" && !slices.Contains(moving, k) {
			out[k] = b.value(t, k)
		} else {
			out[k] = "<" + typ + ">"
		}
	}
	return out
}

// The lease of a won lock ends while the candidate publishes (a stall,
// here the clock moved by the Observer of the win): Campaign does not hand
// out that leadership; it campaigns again and returns a live one with a
// higher term.
func TestCampaignNeverReturnsALeadershipWhoseLeaseIsOver(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		var stalls atomic.Int32
		l := b.locker(t, WithObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventAcquired && stalls.Add(1) == 1 {
				b.clock.Advance(DefaultTTL) // the harness's TTL is 10s: the lease just won is over
			}
		})))
		lead := campaign(t, l, "jobs", "a")
		assert.Equal(t, int64(2), lead.Term(), "the first win's lease was over before it was published")
		assert.True(t, lead.ExpiresAt().After(b.clock.Now()), "the leadership returned is live")
		assert.NoError(t, lead.Err())
		leader, err := l.Leader(ctx, "jobs")
		require.NoError(t, err)
		assert.Equal(t, int64(2), leader.Term)
		require.NoError(t, lead.Resign(ctx))
	})
}

// Reading the leader: a lock won by a candidate that has not published
// yet, and a record left by a leader that crashed, both say nobody leads;
// a value that is no lock or record is ErrNotLockValue.
func TestLeaderBelievesARecordOnlyWhileItsLeaseHoldsTheLock(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t)
		_, err := l.Leader(ctx, "jobs")
		assert.ErrorIs(t, err, ErrNoLeader, "nobody has campaigned")

		live := formatValue(b.clock.Now().Add(time.Minute), "TOKENA", "")
		b.set(t, ElectionKey("jobs"), live)
		_, err = l.Leader(ctx, "jobs")
		assert.ErrorIs(t, err, ErrNoLeader, "won but not published")
		b.set(t, LeaderKey("jobs"), "7:TOKENB:someone else")
		_, err = l.Leader(ctx, "jobs")
		assert.ErrorIs(t, err, ErrNoLeader, "a record of another lease")
		b.set(t, LeaderKey("jobs"), "7:TOKENA:host:8080")
		leader, err := l.Leader(ctx, "jobs")
		require.NoError(t, err)
		assertLeader(t, Leader{Value: "host:8080", Term: 7, ExpiresAt: b.clock.Now().Add(time.Minute).Truncate(time.Millisecond)}, leader,
			"a value may contain ':'")

		b.set(t, LeaderKey("jobs"), "not a record")
		_, err = l.Leader(ctx, "jobs")
		assert.ErrorIs(t, err, ErrNotLockValue)
		b.set(t, ElectionKey("jobs"), "garbage")
		_, err = l.Leader(ctx, "jobs")
		assert.ErrorIs(t, err, ErrNotLockValue)
	})
}

func TestParseRecord(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want leaderRecord
		ok   bool
	}{
		{"1:T:v", leaderRecord{1, "T", "v"}, true},
		{"12:T:", leaderRecord{12, "T", ""}, true},
		{"3:T:a:b:c", leaderRecord{3, "T", "a:b:c"}, true},
		{"0:T:v", leaderRecord{}, false},
		{"-1:T:v", leaderRecord{}, false},
		{"x:T:v", leaderRecord{}, false},
		{"1::v", leaderRecord{}, false},
		{"1:T", leaderRecord{}, false},
		{"", leaderRecord{}, false},
	} {
		got, ok := parseRecord(tc.in)
		assert.Equal(t, tc.ok, ok, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	assert.Equal(t, "5:TOK:a:b", formatRecord(5, "TOK", "a:b"))
}

// Observe: the current leader at once, then each change in term order,
// the zero Leader when a leadership ends with no successor (resigned, or
// its lease ran out by the clock), and the channel closed when ctx ends.
func TestObserveDeliversEachLeaderInTermOrder(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		alice, bob, watcher := b.locker(t, p.opt), b.locker(t, p.opt), b.locker(t, p.opt)
		first := campaign(t, alice, "jobs", "alice")

		observeCtx, stop := context.WithCancel(ctx)
		defer stop()
		seen := watcher.Observe(observeCtx, "jobs")
		assertLeader(t, Leader{Value: "alice", Term: 1, ExpiresAt: first.ExpiresAt()}, await.Recv(t, seen, "the current leader"))

		require.NoError(t, first.Resign(ctx))
		assertLeader(t, Leader{}, await.Recv(t, seen, "nobody leads after a resign"))

		second := campaign(t, bob, "jobs", "bob")
		assertLeader(t, Leader{Value: "bob", Term: second.Term(), ExpiresAt: second.ExpiresAt()}, await.Recv(t, seen, "the next leader"))

		// Bob stops renewing: the clock jumps past his lease.
		b.clock.Set(second.ExpiresAt())
		assertLeader(t, Leader{}, await.Recv(t, seen, "nobody leads once the lease ran out"))
		await.Recv(t, second.Done(), "bob to see his lease run out")

		stop()
		for range seen { // bounded: Observe closes the channel when its ctx ends; await.Do bounds it below
		}
	})
}

// A reader that falls behind gets the latest leader: never an older term
// after a newer one, and never the first leader once a later one leads.
func TestASlowObserverSeesTheLatestLeaderNeverAStaleOne(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		candidates := []*Locker{b.locker(t), b.locker(t), b.locker(t)}
		watcher := b.locker(t)
		observeCtx, stop := context.WithCancel(ctx)
		defer stop()
		seen := watcher.Observe(observeCtx, "jobs")

		var last *Leadership
		for i, c := range candidates {
			if last != nil {
				require.NoError(t, last.Resign(ctx))
			}
			last = campaign(t, c, "jobs", string(rune('a'+i)))
		}
		// Read only now; take what comes until the last leader.
		var terms []int64
		for {
			leader := await.Recv(t, seen, "the latest leader, term 3")
			terms = append(terms, leader.Term)
			if leader.Term == 3 {
				assert.Equal(t, "c", leader.Value)
				break
			}
		}
		var leaders []int64
		for _, term := range terms {
			if term != 0 {
				leaders = append(leaders, term)
			}
		}
		assert.IsIncreasing(t, leaders, "terms delivered in increasing order: %v", terms)
		require.NoError(t, last.Resign(ctx))
	})
}

func TestObserveEndsWithItsContext(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		observeCtx, stop := context.WithCancel(ctx)
		seen := b.locker(t).Observe(observeCtx, "jobs")
		stop()
		await.Do(t, func() {
			for range seen { // bounded: await.Do fails the test if the channel is not closed
			}
		}, "Observe to close its channel when its ctx ends")
	})
}

// The follower's rules, one read at a time.
func TestAFollowerReportsChangesOnly(t *testing.T) {
	a1 := Leader{Value: "a", Term: 1, ExpiresAt: time.UnixMilli(1_000)}
	a1renewed := Leader{Value: "a", Term: 1, ExpiresAt: time.UnixMilli(2_000)}
	b2 := Leader{Value: "b", Term: 2, ExpiresAt: time.UnixMilli(3_000)}
	none := ErrNoLeader
	network := errors.New("i/o timeout")

	var f follower
	f.saw(Leader{}, none)
	assert.False(t, f.pending, "nobody leads at first: nothing to report")
	f.saw(a1, nil)
	assert.Equal(t, follower{latest: a1, term: 1, pending: true}, f)
	f.pending = false
	f.saw(a1renewed, nil)
	assert.Equal(t, follower{latest: a1renewed, term: 1}, f, "a renewal is no change")
	f.saw(Leader{}, network)
	assert.Equal(t, follower{latest: a1renewed, term: 1}, f, "a failed read changes nothing")
	f.saw(b2, nil)
	f.saw(a1, nil)
	assert.Equal(t, follower{latest: b2, term: 2, pending: true}, f, "a stale read of an older term is dropped")
	f.saw(Leader{}, none)
	assert.Equal(t, follower{term: 2, pending: true}, f, "the zero Leader replaces an undelivered leader")
	f.saw(b2, nil)
	assert.Equal(t, follower{term: 2, pending: true}, f, "a leader reported gone is not reported again")
}

// Lead runs the work only while leading, campaigns again after a loss, and
// returns when the work returns while still leading, resigned.
func TestLeadRunsTheWorkWhileLeadingAndCampaignsAgainAfterALoss(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l, operator := b.locker(t), b.locker(t)
		runs := make(chan *Leadership, 2)
		finish := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- l.Lead(await.Context(t), "jobs", "me", func(work context.Context) error {
				lead := LeadershipFrom(work)
				runs <- lead
				if lead.Term() == 1 {
					<-work.Done() // bounded: the test breaks the lock below, which cancels work
					return context.Cause(work)
				}
				select {
				case <-finish:
					return nil
				case <-work.Done():
					return context.Cause(work)
				}
			})
		}()
		first := await.Recv(t, runs, "the work to run as leader")
		assert.Equal(t, int64(1), first.Term())
		_, err := operator.ForceRelease(ctx, ElectionKey("jobs"))
		require.NoError(t, err)
		b.clock.Advance(l.TTL() / 3) // the renewal that finds the loss

		second := await.Recv(t, runs, "the work to run again after the loss, in a new term")
		assert.Greater(t, second.Term(), first.Term())
		close(finish)
		require.NoError(t, await.Recv(t, done, "Lead to return once the work returned"))
		_, err = operator.Leader(ctx, "jobs")
		assert.ErrorIs(t, err, ErrNoLeader, "Lead resigned")
	})
}

func TestLeadEndsWithItsContext(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		holder, l := b.locker(t), b.locker(t)
		lead := campaign(t, holder, "jobs", "holder")
		leadCtx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		err := l.Lead(leadCtx, "jobs", "me", func(context.Context) error {
			t.Error("the work ran while another candidate led")
			return nil
		})
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, lead.Resign(ctx))
	})
}

// Bad input is refused before anything reaches Redis.
func TestElectionBadInputWritesNothing(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		client := b.client(t)
		l := b.lockerOn(t, client)
		sent := record(client)
		_, err := l.Campaign(ctx, "", "v")
		assert.ErrorIs(t, err, ErrInvalidArgument)
		_, err = l.Leader(ctx, "")
		assert.ErrorIs(t, err, ErrInvalidArgument)
		assert.ErrorIs(t, l.Lead(ctx, "jobs", "v", nil), ErrInvalidArgument)
		_, open := <-l.Observe(ctx, "") // bounded: an empty name's channel is closed before Observe returns
		assert.False(t, open)
		assert.Empty(t, sent.names())
	})
}

// The keys of an election share one Cluster slot and contain its name.
func TestElectionKeysShareASlotAndNameTheElection(t *testing.T) {
	for _, name := range []string{"jobs", "{tenant7}.jobs"} {
		keys := []string{ElectionKey(name), FenceKey(ElectionKey(name)), LeaderKey(name)}
		for _, k := range keys {
			assert.Contains(t, k, name)
			assert.Equal(t, hashTagOf(keys[0]), hashTagOf(k), k)
		}
	}
	assert.Equal(t, "{jobs}.election", ElectionKey("jobs"))
	assert.Equal(t, "{jobs}.leader", LeaderKey("jobs"))
	assert.Equal(t, "{jobs}.election.fence", FenceKey(ElectionKey("jobs")))
	assert.Equal(t, "setnxlock:leader:jobs", LeaderChannel("jobs"))
}

// hashTagOf is the part of key Redis Cluster hashes: the bytes between
// the first '{' and the first '}' after it, if any; else the whole key.
func hashTagOf(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	closing := strings.IndexByte(key[open+1:], '}')
	if closing <= 0 {
		return key
	}
	return key[open+1 : open+1+closing]
}

// assertLeader compares leaders, their instants by Equal.
func assertLeader(t *testing.T, want, got Leader, msgAndArgs ...any) {
	t.Helper()
	assert.Equal(t, want.Value, got.Value, msgAndArgs...)
	assert.Equal(t, want.Term, got.Term, msgAndArgs...)
	assert.True(t, want.ExpiresAt.Equal(got.ExpiresAt), "ExpiresAt: want %v, got %v", want.ExpiresAt, got.ExpiresAt)
}

// A candidate whose lock is taken from it between the win and the record
// (its lease broken, someone else's written) writes no record over the
// new holder's: the record is written only while the lock is ours.
func TestARecordIsWrittenOnlyWhileTheLockIsOurs(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		var taken atomic.Bool
		other := formatValue(b.clock.Now().Add(time.Minute), "OTHER", "")
		l := b.locker(t, p.opt, WithObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventAcquired && taken.CompareAndSwap(false, true) {
				b.set(t, ElectionKey("jobs"), other)
				b.set(t, LeaderKey("jobs"), "9:OTHER:other")
			}
		})))
		campaignCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := l.Campaign(campaignCtx, "jobs", "me")
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the other holder's lease is live")
		assert.True(t, taken.Load())
		assert.Equal(t, other, b.value(t, ElectionKey("jobs")), "the new holder's lock is untouched")
		assert.Equal(t, "9:OTHER:other", b.value(t, LeaderKey("jobs")), "and its record")
		leader, err := l.Leader(ctx, "jobs")
		require.NoError(t, err)
		assert.Equal(t, "other", leader.Value)
	})
}

// An observer that cannot read across the end of the lease it last read
// (a partition, timeouts) does not report that nobody leads: the leader
// renewed meanwhile. Once it reads again it reports what it reads.
func TestAnObserverThatCannotReadKeepsTheLastLeaderItRead(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		leader := b.locker(t)
		watcherClient := b.client(t)
		watcher := b.lockerOn(t, watcherClient)
		var failing atomic.Bool
		hookCommand(watcherClient, "get", func(send func() error) error {
			if failing.Load() {
				return errLostReply{}
			}
			return send()
		})
		lead := campaign(t, leader, "jobs", "a")
		observeCtx, stop := context.WithCancel(ctx)
		defer stop()
		seen := watcher.Observe(observeCtx, "jobs")
		first := await.Recv(t, seen, "the current leader")

		failing.Store(true)
		for range 4 { // renewals, each due a third of the TTL later, past the end first read
			renewed := lead.ExpiresAt()
			b.clock.Advance(leader.TTL() / 3)
			require.Eventually(t, func() bool { return lead.ExpiresAt().After(renewed) }, await.Timeout, time.Millisecond, "the leader to renew")
		}
		require.True(t, b.clock.Now().After(first.ExpiresAt))
		select {
		case got := <-seen:
			t.Fatalf("an observer that could not read reported %+v", got)
		case <-time.After(2 * observePoll):
		}

		failing.Store(false)
		require.NoError(t, lead.Resign(ctx))
		assertLeader(t, Leader{}, await.Recv(t, seen, "nobody leads, read once reads work again"))
	})
}

// A lease ends when it says, for Leader and Observe, whatever the skew
// margin: the leader has stopped, though no candidate may take over yet.
func TestLeaderIsNobodyOnceTheLeaseEndsWhateverTheSkewMargin(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		leader, reader := b.locker(t, WithSkewMargin(2*time.Second)), b.locker(t, WithSkewMargin(2*time.Second))
		lead := campaign(t, leader, "jobs", "a")
		b.clock.Set(lead.ExpiresAt().Add(time.Second))
		await.Recv(t, lead.Done(), "the leader to see its lease run out")
		_, err := reader.Leader(ctx, "jobs")
		assert.ErrorIs(t, err, ErrNoLeader)
		c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err = reader.Campaign(c, "jobs", "b")
		assert.ErrorIs(t, err, ErrNotAcquired, "within the margin nobody may take over yet")
	})
}

// A Campaign whose winning write applied but lost its reply, cancelled
// then, leaves no lock behind (H5): nobody would claim it, and it would
// hold the election for a lease (on the classic path without a safety
// net). Acquire does the same for any key.
func TestACancelledCampaignWhoseWinLostItsReplyLeavesNothing(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		client := b.client(t)
		l := b.lockerOn(t, client, p.opt)
		if p.name == "scripts" {
			warm(t, l)
		}
		campaignCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		var once sync.Once
		hookCommand(client, p.acquire, func(send func() error) error {
			err := send()
			once.Do(func() {
				if err == nil {
					cancel()
					err = errLostReply{}
				}
			})
			return err
		})
		_, err := l.Campaign(campaignCtx, "jobs", "me")
		require.ErrorIs(t, err, ErrNotAcquired)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, "<missing>", b.value(t, ElectionKey("jobs")), "the win whose reply was lost is deleted")
		next := campaign(t, b.locker(t, p.opt), "jobs", "next")
		require.NoError(t, next.Resign(ctx))
	})
}

// A Campaign whose deadline passes while the server is busy with its
// winning write (a client with ContextTimeoutEnabled gives up on the
// reply) leaves nothing behind either.
func TestACampaignThatTimedOutOnABusyServerLeavesNothing(t *testing.T) {
	addr := redistest.Start(t).Addr()
	b := newBackend(t, "redis-server", addr)
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	l := b.lockerOn(t, client)
	warm(t, l)
	busy := make(chan error, 1)
	go func() {
		busy <- b.raw.Eval(ctx, `local s = redis.call('TIME') local t0 = s[1]*1e6 + s[2]
while true do local n = redis.call('TIME') if n[1]*1e6 + n[2] - t0 > 300000 then break end end return 1`, nil).Err()
	}()
	time.Sleep(50 * time.Millisecond) // the busy script has begun
	campaignCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := l.Campaign(campaignCtx, "jobs", "me")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, await.Recv(t, busy, "the busy script to end"))
	assert.Equal(t, "<missing>", b.value(t, ElectionKey("jobs")), "a Campaign that timed out left its lock behind")
}

// A term counter (a fence counter) that is not an integer is H7: the
// acquisition writes nothing and says so, on every path, for a free key
// and for the takeover of an expired lease.
func TestAFenceCounterThatIsNoIntegerWritesNothing(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		b.set(t, FenceKey(ElectionKey("jobs")), "garbage")
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := b.locker(t, p.opt).Campaign(c, "jobs", "me")
		assert.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, "<missing>", b.value(t, ElectionKey("jobs")))

		fenced := b.locker(t, p.opt, WithFencing())
		b.set(t, FenceKey("lock.free"), "garbage")
		_, err = fenced.TryAcquire(ctx, "lock.free")
		assert.ErrorIs(t, err, ErrNotLockValue, "a free key")
		assert.Equal(t, "<missing>", b.value(t, "lock.free"), "the win is undone")

		crashed, err := fenced.TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		b.set(t, FenceKey("lock.k"), "garbage")
		b.clock.Set(crashed.ExpiresAt())
		_, err = fenced.TryAcquire(ctx, "lock.k")
		// The command paths stop at their SETNX, refused, whose INCR fails
		// with the server's own error; the scripts go on to the takeover.
		if p.name == "scripts" {
			assert.ErrorIs(t, err, ErrNotLockValue, "the takeover")
		}
		assert.Error(t, err)
		assert.Contains(t, []string{"<missing>", crashed.value}, b.value(t, "lock.k"), "no write of the takeover is left")
		assert.Equal(t, "garbage", b.value(t, FenceKey("lock.k")), "the counter is left untouched")
	})
}

// A leader record key that holds something else is left untouched (H7).
func TestARecordKeyHoldingSomethingElseIsLeftAlone(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		b.set(t, LeaderKey("jobs"), "not a record")
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := b.locker(t).Campaign(c, "jobs", "me")
		assert.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, "not a record", b.value(t, LeaderKey("jobs")))
		assert.Equal(t, "<missing>", b.value(t, ElectionKey("jobs")), "the lock won meanwhile is given back")
	})
}

// Work that panics under Lead does not leave the leadership renewing
// itself for ever: Lead resigns before the panic goes on.
func TestLeadResignsWhenTheWorkPanics(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l, other := b.locker(t), b.locker(t)
		var lead *Leadership
		func() {
			defer func() { assert.Equal(t, "boom", recover()) }()
			_ = l.Lead(ctx, "jobs", "me", func(work context.Context) error {
				lead = LeadershipFrom(work)
				panic("boom")
			})
		}()
		await.Recv(t, lead.Done(), "the leadership to end with the panic")
		assert.NoError(t, lead.Err(), "resigned, not lost")
		next := campaign(t, other, "jobs", "other")
		require.NoError(t, next.Resign(ctx))
	})
}
