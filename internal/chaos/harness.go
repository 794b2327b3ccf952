package chaos

import (
	"context"
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

// Run: a run from its start to its checks, the harness's state while it
// runs, and its shutdown.

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
