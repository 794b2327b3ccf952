package setnxlock

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/redisproc"
	"github.com/setnxlock/setnxlock/internal/redistest"
)

// Candidates of one election as separate processes on a real
// redis-server: the test binary itself, run again with candidateEnv set
// (TestMain), campaigns, leads until its leadership ends and campaigns
// again, and reports each step on its stdout. The test kills leaders with
// SIGKILL, stops them past their lease with SIGSTOP, and makes them resign
// with SIGTERM, while an arbiter checks that no two leaderships' live
// leases overlap and an observer that terms only increase.

// candidateEnv carries a candidate process's configuration, as JSON.
const candidateEnv = "SETNXLOCK_TEST_ELECTION_CANDIDATE"

// electionRoundsEnv sets how many leaders TestElectionAmongProcesses
// kills (default 5); `make election` runs many more to measure failover.
const electionRoundsEnv = "SETNXLOCK_ELECTION_ROUNDS"

type candidateConfig struct {
	Addr string
	Name string
	ID   string
	TTL  time.Duration
}

// candidateEvent is one line a candidate writes. Instants are Unix
// nanoseconds of the machine's clock, which every process here shares.
type candidateEvent struct {
	Kind  string // "lead", "renew", "lost", "resigning", "exit"
	ID    string
	Term  int64
	At    int64 // when it happened
	Until int64 // lead, renew: the end of the lease
	Err   string
}

// runCandidate is a candidate process's main: campaign, lead until the
// leadership ends, campaign again; on SIGTERM resign (or stop
// campaigning) and exit.
func runCandidate(config string) int {
	var cfg candidateConfig
	if err := json.Unmarshal([]byte(config), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		return 2
	}
	var mu sync.Mutex
	out := json.NewEncoder(os.Stdout)
	emit := func(e candidateEvent) {
		e.ID = cfg.ID
		if e.At == 0 {
			e.At = time.Now().UnixNano()
		}
		mu.Lock()
		defer mu.Unlock()
		_ = out.Encode(e)
	}
	client := redis.NewClient(&redis.Options{Addr: cfg.Addr})
	defer client.Close()
	l, err := New(client, WithTTL(cfg.TTL), WithObserver(ObserverFunc(func(e Event) {
		if e.Kind == EventRefreshed && e.Key == ElectionKey(cfg.Name) {
			emit(candidateEvent{Kind: "renew", Term: e.FencingToken, Until: e.ExpiresAt.UnixNano()})
		}
	})))
	if err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	for {
		lead, err := l.Campaign(ctx, cfg.Name, cfg.ID)
		if err != nil {
			emit(candidateEvent{Kind: "exit", Err: err.Error()})
			return 0
		}
		emit(candidateEvent{Kind: "lead", Term: lead.Term(), Until: lead.ExpiresAt().UnixNano()})
		select {
		case <-lead.Done():
			emit(candidateEvent{Kind: "lost", Term: lead.Term(), Err: fmt.Sprint(lead.Err())})
		case <-ctx.Done():
			// The leader stops acting before it resigns: its leadership
			// ends here, whenever the release lands.
			emit(candidateEvent{Kind: "resigning", Term: lead.Term()})
			resign, cancel := context.WithTimeout(context.Background(), cfg.TTL)
			err := lead.Resign(resign)
			cancel()
			emit(candidateEvent{Kind: "exit", Term: lead.Term(), Err: fmt.Sprint(err)})
			return 0
		}
	}
}

// candidate is one candidate process, seen from the test.
type candidate struct {
	id     string
	cmd    *exec.Cmd
	exited chan struct{}
}

// election is the test's side: the processes, their events, the arbiter.
type election struct {
	t      *testing.T
	cfg    candidateConfig
	events chan candidateEvent

	mu         sync.Mutex
	candidates map[string]*candidate
	log        []candidateEvent // every event, in arrival order
	next       int
}

func (e *election) start() *candidate {
	e.t.Helper()
	e.mu.Lock()
	e.next++
	id := "c" + strconv.Itoa(e.next)
	e.mu.Unlock()
	cfg := e.cfg
	cfg.ID = id
	config, err := json.Marshal(cfg)
	require.NoError(e.t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), candidateEnv+"="+string(config))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(e.t, err)
	redisproc.DieWithParent(cmd)
	require.NoError(e.t, cmd.Start())
	c := &candidate{id: id, cmd: cmd, exited: make(chan struct{})}
	go func() {
		defer close(c.exited)
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			var ev candidateEvent
			if err := json.Unmarshal(scanner.Bytes(), &ev); err == nil {
				e.events <- ev
			}
		}
		_ = cmd.Wait() // bounded: stdout has ended, the process is exiting
	}()
	e.mu.Lock()
	e.candidates[id] = c
	e.mu.Unlock()
	return c
}

// until waits for an event that matches, recording every event on the
// way; it fails the test after within.
func (e *election) until(within time.Duration, what string, match func(candidateEvent) bool) candidateEvent {
	e.t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		select {
		case ev := <-e.events:
			e.record(ev)
			if match(ev) {
				return ev
			}
		case <-deadline.C:
			e.t.Fatalf("election: %s did not happen within %v", what, within)
			return candidateEvent{}
		}
	}
}

// record adds ev to the run's log.
func (e *election) record(ev candidateEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, ev)
}

// newLeader waits for a leader with a term above term.
func (e *election) newLeader(term int64, within time.Duration) candidateEvent {
	e.t.Helper()
	return e.until(within, fmt.Sprintf("a leader of a term above %d", term), func(ev candidateEvent) bool {
		return ev.Kind == "lead" && ev.Term > term
	})
}

func (e *election) process(id string) *candidate {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.candidates[id]
}

// noteLease records, as the arbiter's "renew" evidence, the lease a
// stopped or killed leader still holds in Redis: its last renewal may have
// been written without being reported. It returns the end of term's lease:
// the latest end reported or read.
func (e *election) noteLease(reader *Locker, term int64) time.Time {
	e.t.Helper()
	leader, err := reader.Leader(ctx, e.cfg.Name)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil && leader.Term == term {
		e.log = append(e.log, candidateEvent{Kind: "renew", ID: "redis", Term: term, Until: leader.ExpiresAt.UnixNano()})
	}
	var end int64
	for _, ev := range e.log {
		if ev.Term == term && (ev.Kind == "lead" || ev.Kind == "renew") {
			end = max(end, ev.Until)
		}
	}
	return time.Unix(0, end)
}

// leadership is one term's life as the arbiter sees it: from the moment
// its Campaign returned to the end of the last lease it was granted, or to
// when it began to resign.
type leadership struct {
	term       int64
	id         string
	start, end int64
}

// arbiter checks the run's events: no two terms' leaderships overlap.
func (e *election) arbiter() []leadership {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	all, violations := checkLeaderships(e.log)
	for _, v := range violations {
		e.t.Error("arbiter: " + v)
	}
	return all
}

// checkLeaderships rebuilds each term's leadership from the candidates'
// events and returns them in term order, with every violation found: a
// term won twice, renewed by nobody who won it, or begun before the
// previous term's lease had ended.
func checkLeaderships(log []candidateEvent) (all []leadership, violations []string) {
	terms := map[int64]*leadership{}
	of := func(term int64) *leadership {
		if terms[term] == nil {
			terms[term] = &leadership{term: term}
		}
		return terms[term]
	}
	for _, ev := range log {
		switch ev.Kind {
		case "lead":
			l := of(ev.Term)
			if l.id != "" {
				violations = append(violations, fmt.Sprintf("term %d was won twice, by %s and %s", ev.Term, l.id, ev.ID))
			}
			l.id, l.start = ev.ID, ev.At
			l.end = max(l.end, ev.Until)
		case "renew":
			l := of(ev.Term)
			l.end = max(l.end, ev.Until)
		}
	}
	for _, ev := range log {
		if l := terms[ev.Term]; ev.Kind == "resigning" && l != nil {
			l.end = min(l.end, ev.At) // it stopped leading before it released
		}
	}
	for _, l := range terms {
		if l.id == "" {
			violations = append(violations, fmt.Sprintf("term %d renewed by nobody who led it", l.term))
			continue
		}
		all = append(all, *l)
	}
	slices.SortFunc(all, func(a, b leadership) int { return cmp.Compare(a.term, b.term) })
	for i := 1; i < len(all); i++ {
		prev, cur := all[i-1], all[i]
		if cur.start < prev.end {
			violations = append(violations, fmt.Sprintf("term %d (%s) began %v before term %d's (%s) lease ended",
				cur.term, cur.id, time.Duration(prev.end-cur.start), prev.term, prev.id))
		}
	}
	return all, violations
}

// The arbiter catches what it must: overlapping leases, a term won twice.
func TestTheElectionArbiterCatchesOverlaps(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	clean := []candidateEvent{
		{Kind: "lead", ID: "a", Term: 1, At: ms(0), Until: ms(100)},
		{Kind: "renew", ID: "a", Term: 1, Until: ms(140)},
		{Kind: "lead", ID: "b", Term: 2, At: ms(145), Until: ms(245)},
		{Kind: "resigning", ID: "b", Term: 2, At: ms(150)},
		{Kind: "lead", ID: "c", Term: 4, At: ms(151), Until: ms(251)},
	}
	all, violations := checkLeaderships(clean)
	assert.Empty(t, violations)
	assert.Len(t, all, 3)

	renewedLate := append(slices.Clone(clean), candidateEvent{Kind: "renew", ID: "redis", Term: 1, Until: ms(146)})
	_, violations = checkLeaderships(renewedLate)
	assert.Equal(t, []string{"term 2 (b) began 1ms before term 1's (a) lease ended"}, violations)

	twice := append(slices.Clone(clean), candidateEvent{Kind: "lead", ID: "d", Term: 4, At: ms(300), Until: ms(400)})
	_, violations = checkLeaderships(twice)
	assert.Equal(t, []string{"term 4 was won twice, by c and d"}, violations)
}

func TestElectionAmongProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts candidate processes; not in -short")
	}
	rounds := 5
	if v := os.Getenv(electionRoundsEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, electionRoundsEnv)
		rounds = n
	}
	server := redistest.Start(t)
	const ttl = time.Second
	const slack = 500 * time.Millisecond // scheduling under -race on two shared cores, beyond the poll's jitter
	e := &election{t: t, cfg: candidateConfig{Addr: server.Addr(), Name: "jobs", TTL: ttl},
		events: make(chan candidateEvent, 1024), candidates: map[string]*candidate{}}
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, c := range e.candidates {
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			_ = c.cmd.Process.Kill()
		}
	})
	reader, err := New(redis.NewClient(&redis.Options{Addr: server.Addr()}), WithTTL(ttl))
	require.NoError(t, err)
	t.Cleanup(func() { _ = reader.client.Close() })

	// An observer for the whole run.
	observeCtx, stopObserving := context.WithCancel(ctx)
	seen := reader.Observe(observeCtx, "jobs")
	var observedMu sync.Mutex
	var observed []Leader
	observerDone := make(chan struct{})
	go func() {
		defer close(observerDone)
		for leader := range seen { // bounded: closed when observeCtx ends, below
			observedMu.Lock()
			observed = append(observed, leader)
			observedMu.Unlock()
		}
	}()

	for range 3 {
		e.start()
	}
	leader := e.newLeader(0, 10*time.Second)

	// SIGKILL the leader: the next one leads within what was left of its
	// lease, plus the slack.
	// The kill comes at a random point of the leader's renewal cycle.
	var failovers, takeovers []time.Duration
	for range rounds {
		c := e.process(leader.ID)
		time.Sleep(rand.N(ttl / 3))
		killed := time.Now()
		require.NoError(t, c.cmd.Process.Kill())
		leaseEnd := e.noteLease(reader, leader.Term)
		next := e.newLeader(leader.Term, ttl+slack+5*time.Second)
		failovers = append(failovers, time.Duration(next.At-killed.UnixNano()))
		takeover := time.Duration(next.At - leaseEnd.UnixNano())
		takeovers = append(takeovers, takeover)
		assert.LessOrEqual(t, takeover, slack, "term %d's lease end to the next leader", leader.Term)
		await.Recv(t, c.exited, "the killed candidate to exit")
		e.start()
		leader = next
	}

	// SIGSTOP the leader past its lease: a successor leads with a higher
	// term, and the stopped leader, continued, sees its loss.
	stopped := e.process(leader.ID)
	require.NoError(t, stopped.cmd.Process.Signal(syscall.SIGSTOP))
	e.noteLease(reader, leader.Term)
	successor := e.newLeader(leader.Term, ttl+slack+5*time.Second)
	time.Sleep(ttl / 2) // the stopped leader stays stopped well past its lease
	require.NoError(t, stopped.cmd.Process.Signal(syscall.SIGCONT))
	e.until(ttl+slack+5*time.Second, "the continued leader to see its loss", func(ev candidateEvent) bool {
		return ev.ID == leader.ID && ev.Kind == "lost" && ev.Term == leader.Term
	})
	leader = successor

	// SIGTERM: the leader resigns, and the next one leads at once.
	resigning := time.Now()
	require.NoError(t, e.process(leader.ID).cmd.Process.Signal(syscall.SIGTERM))
	next := e.newLeader(leader.Term, 5*time.Second)
	handover := time.Duration(next.At - resigning.UnixNano())
	assert.Less(t, handover, ttl/2, "a resign hands over long before a lease would end")
	leader = next

	// Everyone else stops campaigning, then the leader resigns: nobody leads.
	e.mu.Lock()
	var others []*candidate
	for id, c := range e.candidates {
		if id != leader.ID {
			others = append(others, c)
		}
	}
	e.mu.Unlock()
	for _, c := range others {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range others {
		e.drainUntilExit(c)
	}
	last := e.process(leader.ID)
	require.NoError(t, last.cmd.Process.Signal(syscall.SIGTERM))
	e.drainUntilExit(last)
	_, err = reader.Leader(ctx, "jobs")
	assert.ErrorIs(t, err, ErrNoLeader, "nobody leads once the last leader resigned")
	require.Eventually(t, func() bool {
		observedMu.Lock()
		defer observedMu.Unlock()
		return len(observed) > 0 && observed[len(observed)-1] == Leader{}
	}, 5*time.Second, 10*time.Millisecond, "the observer to see that nobody leads")
	stopObserving()
	await.Recv(t, observerDone, "Observe to close its channel")

	leaderships := e.arbiter()
	require.GreaterOrEqual(t, len(leaderships), rounds+3)
	var terms []int64
	for _, l := range observed {
		if l.Term != 0 {
			terms = append(terms, l.Term)
		}
	}
	assert.IsIncreasing(t, terms, "the observer saw terms in increasing order")
	assert.Equal(t, Leader{}, observed[len(observed)-1], "the observer's last word: nobody leads")

	slices.Sort(failovers)
	slices.Sort(takeovers)
	t.Logf("failover, SIGKILL of the leader to the next leader, TTL %v, %d rounds: p50 %v, p99 %v, max %v", ttl, len(failovers),
		percentile(failovers, 50), percentile(failovers, 99), failovers[len(failovers)-1])
	t.Logf("takeover, the killed leader's lease end to the next leader: p50 %v, p99 %v, max %v",
		percentile(takeovers, 50), percentile(takeovers, 99), takeovers[len(takeovers)-1])
	t.Logf("resign to the next leader: %v; %d terms; the observer saw %d changes", handover, len(leaderships), len(observed))
}

// drainUntilExit records events until c has exited.
func (e *election) drainUntilExit(c *candidate) {
	e.t.Helper()
	deadline := time.NewTimer(await.Timeout)
	defer deadline.Stop()
	for {
		select {
		case ev := <-e.events:
			e.record(ev)
		case <-c.exited:
			return
		case <-deadline.C:
			e.t.Fatalf("election: candidate %s did not exit", c.id)
		}
	}
}

// percentile of sorted durations, by the nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted) + 99) / 100
	return sorted[max(i-1, 0)]
}
