package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/setnxlock/setnxlock/internal/faultproxy"
)

// Faults counts what the harness injected.
type Faults struct {
	Kills    int // client processes killed with SIGKILL while holding a lock
	Pauses   int // client processes stopped with SIGSTOP past their lease
	Crashes  int // goroutine clients that abandoned a lock as if crashed
	Stalls   int // goroutine clients stalled past their lease
	Restarts int // redis-server restarts
	Network  faultproxy.Stats
}

// Total is the number of faults of every kind.
func (f Faults) Total() int {
	return f.Kills + f.Pauses + f.Crashes + f.Stalls + f.Restarts + f.Network.Total()
}

// Result is a finished run.
type Result struct {
	Config   Config
	History  History
	Report   Report
	Faults   Faults
	Stale    int            // writes the resource refused
	Fails    []string       // Acquire errors (a context that ended after 20 leases)
	Releases map[string]int // Release outcomes: released, not-held, error
	Elapsed  time.Duration
}

// Run runs the harness: a redis-server, the fault proxy in front of it, the
// resource, and the clients, under the faults cfg asks for, until one of
// cfg's limits; then it checks the history. An error means the harness
// itself failed; violations are in the Report.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
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
	if err := os.Mkdir(filepath.Join(dir, "redis"), 0o700); err != nil {
		return nil, err
	}
	server, err := startRedis(filepath.Join(dir, "redis"), cfg.Persistence)
	if err != nil {
		return nil, err
	}
	defer server.kill()
	network := cfg.Network
	network.Seed = cfg.Seed
	proxy, err := faultproxy.New(server.addr(), network)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	socket := filepath.Join(dir, "resource.sock")
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}

	h := &harness{cfg: cfg, server: server, proxy: proxy, socket: socket, listener: listener,
		stop: make(chan struct{}), enough: make(chan struct{}), restartNow: make(chan struct{}, 1),
		fatal: make(chan error, 1), procs: map[string]*proc{}, conns: map[net.Conn]struct{}{},
		restarts: streamFor(cfg.Seed, "restarts")}
	h.nextRestart = h.restartGap() / 2
	h.rec = newRecorder(h.acquired)
	return h.run(ctx)
}

// harness is one run in progress.
type harness struct {
	cfg      Config
	server   *redisServer
	proxy    *faultproxy.Proxy
	socket   string
	listener net.Listener
	rec      *recorder

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

	kills, pauses, crashes, stalls, restartCount atomic.Int64
}

func (h *harness) run(ctx context.Context) (*Result, error) {
	start := time.Now()
	workCtx, cancelWork := context.WithCancel(context.Background())
	defer cancelWork()
	h.wg.Add(1)
	go serveResource(h.listener, h.rec, h.hooks, h.stop, &h.wg, h.track)
	h.wg.Add(1)
	go h.restarter()
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

	history := h.rec.history(end)
	h.rec.mu.Lock()
	res := &Result{Config: h.cfg, History: history, Stale: h.rec.stale, Fails: h.rec.fails, Releases: h.rec.releases}
	h.rec.mu.Unlock()
	res.Elapsed = end.Sub(start)
	res.Report = Check(history, Bounds{Recovery: h.cfg.recoveryBound()})
	res.Faults = Faults{Kills: int(h.kills.Load()), Pauses: int(h.pauses.Load()), Crashes: int(h.crashes.Load()),
		Stalls: int(h.stalls.Load()), Restarts: int(h.restartCount.Load()), Network: h.proxy.Stats()}
	return res, nil
}

// shutdown ends the run: recording stops, client processes are killed,
// goroutine clients cancelled, connections cut, and every goroutine the
// run started is waited for. It returns the end of the recorded history.
func (h *harness) shutdown(cancelWork context.CancelFunc) time.Time {
	end := h.rec.stop()
	cancelWork() // before the hang-up below, so goroutine clients take it for the end
	h.mu.Lock()
	h.stopping = true
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
	keys := make([]string, h.cfg.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("chaos.k%d", i)
	}
	retries := 0 // go-redis's default: three retries after a network error
	if slot%2 == 1 {
		retries = -1 // none: the library alone deals with every failed round trip
	}
	return WorkerConfig{
		Name: name, Redis: h.proxy.Addr(), Resource: h.socket, Keys: keys, Seed: h.cfg.Seed,
		Offset: offsetFor(h.cfg.Seed, name, h.cfg.Skew), TTL: h.cfg.TTL, Margin: h.cfg.Margin,
		MinBackoff: h.cfg.MinBackoff, MaxBackoff: h.cfg.MaxBackoff, ReadTimeout: h.cfg.ReadTimeout,
		MaxRetries: retries, LongHoldRate: h.cfg.LongHoldRate,
		NoScripts: slot%4 >= 2, // half the clients on the classic commands alone, half on the script fast path
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
		<-p.exited
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

// hooks gives the resource what it needs to inject faults into a client.
func (h *harness) hooks(client string) clientHooks {
	h.mu.Lock()
	p := h.procs[client]
	h.mu.Unlock()
	plan := &randomPlan{rng: streamFor(h.cfg.Seed, "faults/"+client), ttl: h.cfg.TTL}
	if p != nil {
		plan.crashRate, plan.pauseRate = h.cfg.KillRate, h.cfg.PauseRate
		return clientHooks{
			plan: plan,
			kill: func() bool { h.kills.Add(1); p.kill(); return true },
			pause: func(d time.Duration, stop <-chan struct{}) {
				h.pauses.Add(1)
				p.pause(d, stop)
			},
		}
	}
	plan.crashRate, plan.pauseRate = h.cfg.CrashRate, h.cfg.StallRate
	return clientHooks{
		plan: plan,
		kill: func() bool { h.crashes.Add(1); return false },
		pause: func(d time.Duration, stop <-chan struct{}) {
			h.stalls.Add(1)
			_ = sleepOrStop(d, stop)
		},
	}
}

// randomPlan draws each write's fate from the client's own stream.
type randomPlan struct {
	rng                  *rand.Rand
	crashRate, pauseRate float64
	ttl                  time.Duration
}

// next draws twice whatever the rates, so the schedule of one fault does
// not depend on the other's rate.
func (p *randomPlan) next() (action, time.Duration) {
	x, length := p.rng.Float64(), p.rng.Float64()
	switch {
	case x < p.crashRate:
		return actCrash, 0
	case x < p.crashRate+p.pauseRate:
		return actPause, p.ttl + time.Duration(length*float64(p.ttl)) // past the lease, by up to another lease
	}
	return actNone, 0
}

// acquired is the recorder's callback: it ends the run at the target and
// triggers server restarts on the seeded schedule.
func (h *harness) acquired(n int) {
	if h.cfg.Acquisitions > 0 && n >= h.cfg.Acquisitions {
		h.enoughOnce.Do(func() { close(h.enough) })
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

// restarter kills and restarts redis-server when told to.
func (h *harness) restarter() {
	defer h.wg.Done()
	for {
		select {
		case <-h.stop:
			return
		case <-h.restartNow:
		}
		down, err := h.server.restart()
		if err != nil {
			h.fail(err)
			return
		}
		h.restartCount.Add(1)
		h.rec.serverDown(down)
	}
}

// progress logs a line every few seconds.
func (h *harness) progress(start time.Time) {
	if h.cfg.Log == nil {
		return
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
			h.rec.mu.Lock()
			n, stale := len(h.rec.order), h.rec.stale
			h.rec.mu.Unlock()
			fmt.Fprintf(h.cfg.Log, "chaos: %5.1fs acquisitions=%d stale-writes=%d kills=%d pauses=%d restarts=%d\n",
				time.Since(start).Seconds(), n, stale, h.kills.Load(), h.pauses.Load(), h.restartCount.Load())
		}
	}
}

// Summary is the last line `make chaos` prints.
func (r *Result) Summary() string {
	return fmt.Sprintf("chaos: acquisitions=%d faults=%d violations=%d recovered_p99=%s",
		r.Report.Acquisitions, r.Faults.Total(), len(r.Report.Violations), roundDuration(Percentile(r.Report.Recovered, 99)))
}

// roundDuration keeps two or three significant digits.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	default:
		return d.Round(100 * time.Microsecond)
	}
}

// Details describes the run beyond the summary line.
func (r *Result) Details() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "chaos: seed=%d goroutines=%d procs=%d keys=%d ttl=%s skew=%s margin=%s persistence=%t client-tags=%q\n",
		c.Seed, c.Goroutines, c.Procs, c.Keys, c.TTL, c.Skew, c.Margin, c.Persistence, c.ClientTags)
	f := r.Faults
	fmt.Fprintf(&b, "chaos: %s elapsed; faults: kills=%d pauses=%d crashes=%d stalls=%d restarts=%d delayed=%d lost-replies=%d cuts=%d\n",
		r.Elapsed.Round(time.Millisecond), f.Kills, f.Pauses, f.Crashes, f.Stalls, f.Restarts, f.Network.Delayed, f.Network.Lost, f.Network.Cut)
	fmt.Fprintf(&b, "chaos: writes=%d stale-writes-refused=%d releases=%v acquire-errors=%d\n",
		len(r.History.Ops), r.Stale, r.Releases, len(r.Fails))
	for i, f := range r.Fails {
		if i == 3 {
			break
		}
		fmt.Fprintf(&b, "chaos:   acquire error: %s\n", strings.TrimSpace(strings.TrimPrefix(f, "fail ")))
	}
	rec := r.Report.Recovered
	fmt.Fprintf(&b, "chaos: crashed holders recovered=%d (unrecovered at the end: %d) p50=%s p99=%s max=%s bound=%s\n",
		len(rec), r.Report.Unrecovered, roundDuration(Percentile(rec, 50)), roundDuration(Percentile(rec, 99)),
		roundDuration(Percentile(rec, 100)), c.recoveryBound())
	if len(rec) > 0 {
		s := r.Report.Slowest
		fmt.Fprintf(&b, "chaos:   slowest: %s/%d's lease, recovered by %s/%d\n", s.Crashed.Client, s.Crashed.Seq, s.Next.Client, s.Next.Seq)
	}
	fmt.Fprintf(&b, "chaos: violations: %s=%d %s=%d %s=%d %s=%d\n",
		LeaseOverlap, r.Report.Count(LeaseOverlap), FenceInterleave, r.Report.Count(FenceInterleave),
		TokenOrder, r.Report.Count(TokenOrder), SlowRecovery, r.Report.Count(SlowRecovery))
	for i, v := range r.Report.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "chaos:   ... and %d more\n", len(r.Report.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "chaos:   %s\n", v)
	}
	return b.String()
}
