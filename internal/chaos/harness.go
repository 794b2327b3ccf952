package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/setnxlock/setnxlock/internal/faultproxy"
)

// Faults counts what the harness injected, by kind.
type Faults struct {
	Kinds   map[string]int // every kind but the network's
	Network faultproxy.Stats
}

// The kinds of fault the harness counts (besides the proxy's and those a
// client injects into itself: cancel, handoff-cancel, close).
const (
	FaultKill        = "kill"         // a process client killed inside its critical section
	FaultPause       = "pause"        // a process client stopped past its lease inside its critical section
	FaultCrash       = "crash"        // a goroutine client abandoned its locks as if crashed
	FaultStall       = "stall"        // a goroutine client stalled past its lease inside its critical section
	FaultGrantPause  = "grant-pause"  // a holder stopped or stalled right after Acquire returned
	FaultReleaseKill = "release-kill" // a process client killed while it released
	FaultWaiterKill  = "waiter-kill"  // a process client killed while one of its Acquire calls waited
	FaultRestart     = "restart"      // a redis-server killed and restarted
	FaultPubSubKill  = "pubsub-kill"  // CLIENT KILL TYPE pubsub
	FaultScriptFlush = "script-flush" // SCRIPT FLUSH
	FaultACLRevoke   = "acl-revoke"   // pub/sub or scripting revoked from the clients' user for a while
	FaultOOM         = "oom"          // 30ms with maxmemory 1: writes that need memory fail with OOM
	FaultQueuedLost  = "queued-lost"  // a queued attempt's reply lost on purpose (also among the proxies' lost replies)
	FaultQueuedHeld  = "queued-held"  // a queued attempt held back past the read timeout on purpose (also among the proxies' held requests)
	FaultPartition   = "partition"    // a client inside a critical section cut off from Redis, its proxy frozen for a while

	// The faults a client injects into itself and reports (worker.go).
	FaultCancel        = "cancel"         // an Acquire's context ended at a random moment
	FaultHandoffCancel = "handoff-cancel" // an Acquire cancelled within 3ms of a release of its key
	FaultClose         = "close"          // Locker.Close while one of the client's Acquire calls waited
)

// Total is the number of faults of every kind.
func (f Faults) Total() int {
	n := f.Network.Total()
	for _, c := range f.Kinds {
		n += c
	}
	return n
}

// Result is a finished run.
type Result struct {
	Config    Config
	History   History
	Report    Report
	Linearity Linearity
	Final     Final // the liveness checks once the faults had stopped
	Faults    Faults
	Stale     int            // writes the resource refused
	Fails     []string       // Acquire errors
	Releases  map[string]int // Release outcomes: released, not-held, error
	Elapsed   time.Duration
}

// Run runs the harness: the servers of cfg.Mode, the fault proxies in
// front of them, the resource, and the clients, under the faults cfg asks
// for, until one of cfg's limits; then it stops the faults, checks that
// every key can be acquired and every queue drains, and checks the
// history with both checkers. An error means the harness itself failed;
// violations are in the Report.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	goroutines := runtime.NumGoroutine()
	dir, err := os.MkdirTemp("", "setnxlock-chaos-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if cfg.Procs > 0 && cfg.ClientBinary == "" {
		if cfg.ClientBinary, err = BuildClient(dir, cfg.ClientTags); err != nil {
			return nil, err
		}
	}
	servers, err := startBackend(dir, cfg)
	if err != nil {
		return nil, err
	}
	defer servers.close()
	socket := filepath.Join(dir, "resource.sock")
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}

	h := &harness{cfg: cfg, servers: servers, socket: socket, listener: listener,
		stop: make(chan struct{}), enough: make(chan struct{}), restartNow: make(chan struct{}, 1),
		fatal: make(chan error, 1), procs: map[string]*proc{}, conns: map[net.Conn]struct{}{},
		restarts: streamFor(cfg.Seed, "restarts")}
	h.nextRestart = h.restartGap() / 2
	h.rec = newRecorder(h.acquired)
	h.res = &resource{rec: h.rec, hooks: h.hooks, stop: h.stop, track: h.track}
	res, err := h.run(ctx)
	servers.close() // its proxies' goroutines are the run's too
	if err != nil {
		return nil, err
	}
	res.Final.goroutines(goroutines, h.cfg.finalBound())
	res.Report.Violations = append(res.Report.Violations, res.Final.Violations...)
	return res, nil
}

// harness is one run in progress.
type harness struct {
	cfg      Config
	servers  *backend
	socket   string
	listener net.Listener
	rec      *recorder
	res      *resource

	stop       chan struct{} // closed when the run ends
	enough     chan struct{} // closed when cfg.Acquisitions are recorded
	enoughOnce sync.Once
	restartNow chan struct{}
	fatal      chan error // the first failure of the harness itself
	wg         sync.WaitGroup

	mu          sync.Mutex
	procs       map[string]*proc      // running client processes, by name
	conns       map[net.Conn]struct{} // resource connections, cut at the end
	stopping    bool
	restarts    *rand.Rand // guarded by mu
	nextRestart int
	revoked     [2]bool // pub/sub, scripting: revocation begun; guarded by mu
}

// fault records one fault the harness injected, into client ("" for the
// servers).
func (h *harness) fault(kind, client string) { h.rec.fault(kind, client) }

func (h *harness) run(ctx context.Context) (*Result, error) {
	start := time.Now()
	workCtx, cancelWork := context.WithCancel(context.Background())
	defer cancelWork()
	h.wg.Add(1)
	go h.res.serve(h.listener, &h.wg)
	h.wg.Add(1)
	go h.restarter()
	h.wg.Add(1)
	go h.sample()
	h.wg.Add(1)
	go h.watchStalls()
	h.startServerFaults()
	h.startPartitions()
	for slot := range h.cfg.Goroutines {
		h.wg.Add(1)
		go h.goroutineClient(workCtx, slot)
	}
	for slot := range h.cfg.Procs {
		h.wg.Add(1)
		go h.processClient(slot)
	}
	go h.progress(start)

	var err error
	limit := time.NewTimer(max(h.cfg.Duration, 0))
	if h.cfg.Duration <= 0 {
		limit.Stop()
	}
	select {
	case <-h.enough:
	case <-limit.C:
	case <-ctx.Done():
		err = ctx.Err()
	case err = <-h.fatal:
	}
	limit.Stop()
	end := h.shutdown(cancelWork)
	if err == nil {
		select {
		case err = <-h.fatal:
		default:
		}
	}
	if err != nil {
		return nil, err
	}

	history := h.rec.history(h.cfg.Mode, end)
	h.rec.mu.Lock()
	res := &Result{Config: h.cfg, History: history, Stale: h.rec.stale, Fails: h.rec.fails, Releases: h.rec.releases}
	kinds := maps.Clone(h.rec.faults)
	h.rec.mu.Unlock()
	res.Elapsed = end.Sub(start)
	res.Faults = Faults{Kinds: kinds, Network: h.servers.stats()}
	res.Final = finalChecks(h.cfg, h.servers)
	res.check()
	return res, nil
}

// check runs both checkers on the result's history and compares them.
func (res *Result) check() {
	res.Report = Check(res.History, res.Config.bounds())
	res.Linearity = CheckLinearizable(res.History, linearizeTimeout)
	res.Report.Violations = append(res.Report.Violations, res.Linearity.Violations(res.Report)...)
}

// Recheck checks a history recorded by a run of cfg again, as Run did,
// but without the liveness checks of the run's end: to study a history
// saved earlier.
func Recheck(cfg Config, h History) *Result {
	res := &Result{Config: cfg, History: h}
	res.check()
	return res
}

// linearizeTimeout bounds the second checker's work on one key.
const linearizeTimeout = 20 * time.Second

// shutdown ends the run: the faults stop, recording stops, client
// processes are killed, goroutine clients cancelled, connections cut, and
// every goroutine the run started is waited for. It returns the end of
// the recorded history.
func (h *harness) shutdown(cancelWork context.CancelFunc) time.Time {
	// Stopping first: once recording stops the resource hangs up on a
	// client's next write, and a client hung up on from then on was hung
	// up on by the run's end, not by a failure (goroutineClient,
	// processClient). Before, a loop that wrote in between failed the run
	// with "EOF".
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	end := h.rec.stop()
	h.servers.setNetworkFaults(faultproxy.Faults{})
	h.servers.loseRepliesTo(nil)
	h.servers.holdRequestsTo(nil)
	cancelWork()
	h.mu.Lock()
	close(h.stop)
	for _, p := range h.procs {
		p.kill()
	}
	for c := range h.conns {
		_ = c.Close()
	}
	h.mu.Unlock()
	_ = h.listener.Close()
	h.wg.Wait()
	if h.cfg.RevokeACL {
		h.restoreACL()
	}
	return end
}

// track registers a resource connection so that shutdown can cut it.
func (h *harness) track(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		return false
	}
	h.conns[c] = struct{}{}
	return true
}

func (h *harness) fail(err error) {
	select {
	case h.fatal <- err:
	default:
	}
}

// workerConfig is the configuration of one client incarnation.
func (h *harness) workerConfig(name string, slot int) WorkerConfig {
	retries := 0 // go-redis's default: three retries after a network error
	if slot%2 == 1 {
		retries = -1 // none: the library alone deals with every failed round trip
	}
	c := h.cfg
	return WorkerConfig{
		Name: name, Redis: h.servers.clientAddrs(slot), Cluster: h.servers.cluster, Password: aclPassword,
		Resource: h.socket, Keys: c.lockKeys(), Seed: c.Seed, Offset: offsetFor(c.Seed, name, c.Skew),
		Locker: lockerFor(c.Mode, slot), Loops: c.Loops, TTL: c.TTL, Margin: c.Margin,
		MinBackoff: c.MinBackoff, MaxBackoff: c.MaxBackoff, ReadTimeout: c.ReadTimeout,
		MaxRetries: retries, LongHoldRate: c.LongHoldRate,
		CancelRate: c.CancelRate, HandoffCancelRate: c.HandoffCancelRate, CloseEvery: c.CloseEvery,
	}
}

// goroutineClient runs incarnation after incarnation of one goroutine
// client: a crash ends one and the next starts afresh, with a new Locker.
func (h *harness) goroutineClient(ctx context.Context, slot int) {
	defer h.wg.Done()
	for inc := 0; ctx.Err() == nil; inc++ {
		err := RunWorker(ctx, h.workerConfig(fmt.Sprintf("g%d.%d", slot, inc), slot))
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errCrashed):
		case HungUp(err) && h.isStopping():
			return
		case err != nil:
			h.fail(fmt.Errorf("chaos: goroutine client g%d.%d: %w", slot, inc, err))
			return
		}
	}
}

// processClient runs process after process for one client slot: the
// harness kills them; a process that exits on its own is a failure.
func (h *harness) processClient(slot int) {
	defer h.wg.Done()
	for inc := 0; ; inc++ {
		name := fmt.Sprintf("p%d.%d", slot, inc)
		h.mu.Lock() // registered before it can say hello
		if h.stopping {
			h.mu.Unlock()
			return
		}
		p, err := startProc(h.cfg.ClientBinary, h.workerConfig(name, h.cfg.Goroutines+slot))
		if err == nil {
			h.procs[name] = p
		}
		h.mu.Unlock()
		if err != nil {
			h.fail(fmt.Errorf("chaos: start client %s: %w", name, err))
			return
		}
		<-p.exited // bounded: the harness kills every process at the latest when the run stops
		h.rec.killed(name, time.Now())
		h.mu.Lock()
		delete(h.procs, name)
		stopping := h.stopping
		h.mu.Unlock()
		if stopping {
			return
		}
		if err := p.unexpectedExit(); err != nil {
			h.fail(fmt.Errorf("chaos: client %s exited: %w", name, err))
			return
		}
	}
}

func (h *harness) isStopping() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopping
}

// hooks gives the resource what it needs to inject faults into a client
// (one loop of it).
func (h *harness) hooks(client string) clientHooks {
	process := processOf(client)
	h.mu.Lock()
	p := h.procs[process]
	h.mu.Unlock()
	plan := &randomPlan{rng: streamFor(h.cfg.Seed, "faults/"+client), grants: streamFor(h.cfg.Seed, "grant-faults/"+client),
		releases: streamFor(h.cfg.Seed, "release-faults/"+client), ttl: h.cfg.TTL, grantPauseRate: h.cfg.GrantPauseRate}
	if p != nil {
		plan.crashRate, plan.pauseRate, plan.releaseKillRate = h.cfg.KillRate, h.cfg.PauseRate, h.cfg.ReleaseKillRate
		return clientHooks{
			plan: plan,
			kill: func(kind string) bool { h.fault(kind, client); p.kill(); return true },
			pause: func(kind string, d time.Duration, stop <-chan struct{}) {
				h.rec.faultFor(kind, client, d)
				p.pause(d, stop)
			},
		}
	}
	plan.crashRate, plan.pauseRate = h.cfg.CrashRate, h.cfg.StallRate
	return clientHooks{
		plan: plan,
		kill: func(string) bool { h.fault(FaultCrash, client); return false },
		pause: func(kind string, d time.Duration, stop <-chan struct{}) {
			if kind == FaultPause {
				kind = FaultStall
			}
			h.fault(kind, client)
			_ = sleepOrStop(d, stop)
		},
	}
}

// randomPlan draws each fault from the client's own streams.
type randomPlan struct {
	rng, grants, releases                *rand.Rand
	crashRate, pauseRate, grantPauseRate float64
	releaseKillRate                      float64
	ttl                                  time.Duration
}

// next draws twice whatever the rates, so the schedule of one fault does
// not depend on the other's rate.
func (p *randomPlan) next() (action, time.Duration) {
	x, length := p.rng.Float64(), p.rng.Float64()
	switch {
	case x < p.crashRate:
		return actCrash, 0
	case x < p.crashRate+p.pauseRate:
		return actPause, p.pastLease(length)
	}
	return actNone, 0
}

func (p *randomPlan) afterGrant() (bool, time.Duration) {
	x, length := p.grants.Float64(), p.grants.Float64()
	return x < p.grantPauseRate, p.pastLease(length)
}

func (p *randomPlan) atRelease() (bool, time.Duration) {
	x, delay := p.releases.Float64(), p.releases.Float64()
	return x < p.releaseKillRate, time.Duration(delay * float64(2*time.Millisecond))
}

// pastLease is a pause from one lease to two.
func (p *randomPlan) pastLease(length float64) time.Duration {
	return p.ttl + time.Duration(length*float64(p.ttl))
}

// acquired is the recorder's callback: it ends the run at the target and
// triggers server restarts and ACL revocations on the seeded schedule.
func (h *harness) acquired(n int) {
	if h.cfg.Acquisitions > 0 && n >= h.cfg.Acquisitions {
		h.enoughOnce.Do(func() { close(h.enough) })
	}
	if h.cfg.RevokeACL && h.cfg.Acquisitions > 0 {
		h.revokeOnSchedule(n)
	}
	if h.cfg.RestartEvery <= 0 {
		return
	}
	h.mu.Lock()
	due := n >= h.nextRestart
	if due {
		h.nextRestart = n + h.restartGap()
	}
	h.mu.Unlock()
	if due {
		select {
		case h.restartNow <- struct{}{}:
		default: // one is already under way
		}
	}
}

// restartGap draws the number of acquisitions until the next restart:
// RestartEvery, give or take half. Callers hold mu, or own h.
func (h *harness) restartGap() int {
	every := max(h.cfg.RestartEvery, 1)
	return every/2 + h.restarts.IntN(every+1)
}

// restarter kills and restarts a redis-server when told to.
func (h *harness) restarter() {
	defer h.wg.Done()
	rng := streamFor(h.cfg.Seed, "restarted-node")
	for {
		select {
		case <-h.stop:
			return
		case <-h.restartNow:
		}
		down, err := h.servers.restart(rng)
		if err != nil {
			h.fail(err)
			return
		}
		h.fault(FaultRestart, "")
		h.rec.serverDown(down)
	}
}

// progress logs a line every few seconds.
func (h *harness) progress(start time.Time) {
	if h.cfg.Log == nil {
		return
	}
	h.ticks(5*time.Second, func() {
		h.rec.mu.Lock()
		n, stale, calls := len(h.rec.order), h.rec.stale, len(h.rec.calls)
		kills, restarts := h.rec.faults[FaultKill]+h.rec.faults[FaultWaiterKill]+h.rec.faults[FaultReleaseKill], h.rec.faults[FaultRestart]
		h.rec.mu.Unlock()
		fmt.Fprintf(h.cfg.Log, "chaos: %s %5.1fs acquisitions=%d calls-without-lock=%d stale-writes=%d kills=%d restarts=%d\n",
			h.cfg.Mode, time.Since(start).Seconds(), n, calls, stale, kills, restarts)
	})
}

// ticks calls fn every period until the run stops.
func (h *harness) ticks(period time.Duration, fn func()) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
			fn()
		}
	}
}
