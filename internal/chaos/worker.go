package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock"
)

// WorkerConfig is one lock client: which servers it talks to, which keys
// it locks and how its Locker is configured. The harness fills it for its
// goroutine clients and passes it as flags to client processes.
type WorkerConfig struct {
	Name     string   // the client incarnation, e.g. "p1.2"
	Redis    []string // host:port of the fault proxy in front of redis-server; on a Cluster, "node>proxy" for each node
	Cluster  bool     // Redis lists Cluster nodes: connect with a Cluster client, dialling each node through its proxy
	Password string   // of Locker.User, when it is set
	Resource string   // the unix socket of the harness's resource
	Keys     []string // the lock keys it picks from at random
	Seed     uint64   // the run's seed; the worker's choices draw from its own stream of it
	Offset   time.Duration

	Locker                 LockerConfig
	Loops                  int // acquisition loops sharing the Locker
	TTL, Margin            time.Duration
	MinBackoff, MaxBackoff time.Duration
	ReadTimeout            time.Duration // go-redis read and write timeouts: how long a lost reply stalls a command
	MaxRetries             int           // go-redis retries of a command after a network error (-1: none)
	LongHoldRate           float64       // share of critical sections that work until the very end of the lease (or 1–3 TTLs with auto-refresh)

	CancelRate        float64       // per Acquire: its context ends at a random moment within two leases
	HandoffCancelRate float64       // per release of a key announced by the harness: cancel an Acquire waiting on it within 3ms
	CloseEvery        time.Duration // mean time between Locker.Close calls while an Acquire waits (0: never)
}

// errCrashed is RunWorker's error when the harness told it to crash.
var errCrashed = errors.New("chaos: told to crash")

// RunWorker locks keys until ctx ends or the harness hangs up, in
// cfg.Loops loops sharing one Locker: acquire, report, run the critical
// section under checks of the lease, release, report. It returns
// errCrashed, holding its locks and never releasing them, when the harness
// tells one loop to crash.
func RunWorker(parent context.Context, cfg WorkerConfig) error {
	client := newRedisClient(cfg)
	defer client.Close()
	client.AddHook(traceHook{retried: retriedAfter(cfg)})
	clock := SkewedClock{Offset: cfg.Offset}
	opts := append([]setnxlock.Option{
		setnxlock.WithTTL(cfg.TTL), setnxlock.WithClock(clock),
		setnxlock.WithSkewMargin(cfg.Margin), setnxlock.WithBackoff(cfg.MinBackoff, cfg.MaxBackoff),
	}, cfg.Locker.Options()...)
	locker, err := setnxlock.New(client, opts...)
	if err != nil {
		return err
	}
	defer locker.Close()

	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	ev, err := dialEvents(cfg.Resource, cfg.Name)
	if err != nil {
		return fmt.Errorf("chaos: %s: events: %w", cfg.Name, err)
	}
	defer ev.close()
	waits := &waiting{byKey: map[string]map[*pendingAcquire]struct{}{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ev.cancelOnRelease(waits, cfg.HandoffCancelRate, streamFor(cfg.Seed, "handoff-cancels/"+cfg.Name))
	}()
	if cfg.CloseEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			closeWhileWaiting(ctx, locker, waits, ev, cfg.CloseEvery, streamFor(cfg.Seed, "closes/"+cfg.Name))
		}()
	}
	errs := make(chan error, cfg.Loops)
	for loop := range cfg.Loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := runLoop(ctx, cfg, fmt.Sprintf("%s/%d", cfg.Name, loop), locker, clock, waits, ev)
			if err != nil {
				cancel(err) // one loop crashing or hung up on ends the client
			}
			errs <- err
		}()
	}
	var first error
	for range cfg.Loops {
		if err := <-errs; err != nil && first == nil { // bounded: every loop sends once
			first = err
		}
	}
	ev.close() // ends cancelOnRelease
	cancel(nil)
	wg.Wait()
	if parent.Err() != nil {
		return nil
	}
	return first
}

// newRedisClient connects to the proxy in front of the server, or to the
// Cluster's nodes through theirs.
func newRedisClient(cfg WorkerConfig) redis.UniversalClient {
	user, password := cfg.Locker.User, ""
	if user != "" {
		password = cfg.Password
	}
	if !cfg.Cluster {
		return redis.NewClient(&redis.Options{
			Addr: cfg.Redis[0], Username: user, Password: password, PoolSize: 2 + cfg.Loops, MaxRetries: cfg.MaxRetries,
			DialTimeout: 2 * cfg.ReadTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.ReadTimeout,
			ContextTimeoutEnabled: cfg.Locker.ContextTimeout, ClientName: cfg.Name,
		})
	}
	proxyOf := map[string]string{}
	var nodes []string
	for _, pair := range cfg.Redis {
		node, proxy, _ := cutPair(pair)
		proxyOf[node] = proxy
		nodes = append(nodes, node)
	}
	var dialer net.Dialer
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: nodes, Username: user, Password: password, PoolSize: 2 + cfg.Loops, MaxRetries: cfg.MaxRetries,
		DialTimeout: 2 * cfg.ReadTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.ReadTimeout,
		ContextTimeoutEnabled: cfg.Locker.ContextTimeout, ClientName: cfg.Name,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if proxy, ok := proxyOf[addr]; ok {
				addr = proxy // every node's traffic goes through its fault proxy
			}
			return dialer.DialContext(ctx, network, addr)
		},
	})
}

// loop is one acquisition loop's state.
type loop struct {
	cfg    WorkerConfig
	name   string
	res    *resourceConn
	locker *setnxlock.Locker
	clock  SkewedClock
	waits  *waiting
	ev     *eventConn
	rng    *rand.Rand
	seq    int64
}

// runLoop runs one loop until ctx ends, the harness hangs up, or the
// harness tells it to crash.
func runLoop(ctx context.Context, cfg WorkerConfig, name string, locker *setnxlock.Locker, clock SkewedClock, waits *waiting, ev *eventConn) error {
	res, err := dialResource(cfg.Resource, name)
	if err != nil {
		return fmt.Errorf("chaos: %s: resource: %w", name, err)
	}
	defer res.close()
	l := &loop{cfg: cfg, name: name, res: res, locker: locker, clock: clock, waits: waits, ev: ev,
		rng: streamFor(cfg.Seed, "worker/"+name)}
	for ctx.Err() == nil {
		if err := l.once(ctx); err != nil {
			if ctx.Err() != nil && !errors.Is(err, errCrashed) {
				return nil
			}
			return err
		}
	}
	return nil
}

// once is one acquisition and its critical section. It returns an error
// only when the loop must stop.
func (l *loop) once(ctx context.Context) error {
	key := l.cfg.Keys[l.rng.IntN(len(l.cfg.Keys))]
	long := l.rng.Float64() < l.cfg.LongHoldRate
	writes := 1 + l.rng.IntN(3)
	hold := time.Duration((1 + 2*l.rng.Float64()) * float64(l.cfg.TTL)) // a long hold with auto-refresh
	cancelAt := time.Duration(-1)
	if x, at := l.rng.Float64(), l.rng.Float64(); x < l.cfg.CancelRate {
		cancelAt = time.Duration(at * float64(2*l.cfg.TTL))
	}

	l.seq++
	seq := strconv.FormatInt(l.seq, 10)
	if _, err := l.res.call("call", seq, key, nanos(time.Now())); err != nil {
		return err
	}
	lock, trace, err := l.acquire(ctx, key, cancelAt)
	doubt := trace.doubt.Load()
	if err != nil {
		// On record even when the client is ending (a sibling loop told to
		// crash): a write in doubt may still hold the key.
		if _, err := l.res.call("fail", seq, key, nanos(time.Now()), strconv.FormatBool(doubt), oneLine(err)); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A service whose Acquire failed (OOM, say) tries again a little later.
		return sleep(ctx, time.Duration(l.rng.Float64()*float64(l.cfg.MaxBackoff)))
	}
	granted := time.Now()
	token := strconv.FormatInt(lock.FencingToken(), 10)
	if _, err := l.res.call("acq", seq, key, token, nanos(trace.sentAt(granted)), nanos(granted), l.wall(lock.ExpiresAt()), strconv.FormatBool(doubt),
		strconv.FormatInt(lock.ExpiresAt().UnixMilli(), 10)); err != nil {
		return err
	}

	// The critical section: each write to the resource only after a check
	// that the lease is live by our own clock, as the README asks of a
	// holder, and a last check on the way out. A write still in flight
	// when the lease ends is what fencing is for. A holder that works
	// until told (UntilLost) still reports each check, but goes on until
	// its Lock tells it of a loss, as code under Lock.Context does.
	var loss *lossWatch
	if l.cfg.Locker.UntilLost {
		loss = watchLoss(lock)
		defer loss.stop()
	}
	for i := 0; ; i++ {
		now, ends := l.clock.Now(), lock.ExpiresAt()
		live := now.Before(ends)
		more := i < writes || (long && (!l.cfg.Locker.AutoRefresh || time.Since(granted) < hold))
		over := !live
		if loss != nil {
			over = loss.told()
		}
		if over || !more {
			// On record before the release is sent, so before anyone else
			// can be granted the key: a run that stops mid-release cannot
			// lose it.
			told, toldEnd := "0", "0"
			if loss != nil && loss.told() {
				told, toldEnd = nanos(loss.at), l.wall(loss.leaseEnd)
			}
			if _, err := l.res.call("done", seq, l.wall(now), strconv.FormatBool(live), l.wall(ends), told, toldEnd); err != nil {
				return err
			}
			break
		}
		reply, err := l.res.call("op", seq, key, token, l.wall(now), l.wall(ends))
		switch {
		case err != nil:
			return err
		case reply == replyCrash:
			return errCrashed // the lock is never released
		case reply == replyStale:
			writes = i // fenced out: a later holder has written; leave after the next check
			long = false
		case long && loss != nil:
			loss.sleep(l.cfg.TTL / 8)
		case long:
			time.Sleep(l.cfg.TTL / 8)
		}
	}
	outcome := l.release(ctx, lock)
	_, err = l.res.call("rel", seq, outcome, nanos(time.Now()))
	return err
}

// wall turns an instant of our clock into a wall-clock instant, as
// protocol nanoseconds.
func (l *loop) wall(t time.Time) string { return nanos(t.Add(-l.cfg.Offset)) }

// holding is what a loop holds: a Lock, or in an election run a
// Leadership, whose term is its fencing token.
type holding interface {
	FencingToken() int64
	ExpiresAt() time.Time
	Done() <-chan struct{}
	// release gives it up and names the outcome for the report.
	release(ctx context.Context) (outcome string, retry bool)
}

type heldLock struct{ *setnxlock.Lock }

func (h heldLock) release(ctx context.Context) (string, bool) {
	switch err := h.Release(ctx); {
	case err == nil:
		return OutcomeReleased, false
	case errors.Is(err, setnxlock.ErrNotHeld):
		return OutcomeNotHeld, false
	}
	return OutcomeError, true
}

type heldLeadership struct{ *setnxlock.Leadership }

func (h heldLeadership) FencingToken() int64 { return h.Term() }

// release resigns. Resign is nil once nothing of the leadership is left,
// lost or not; Err tells which.
func (h heldLeadership) release(ctx context.Context) (string, bool) {
	switch err := h.Resign(ctx); {
	case err != nil:
		return OutcomeError, true
	case h.Err() != nil:
		return OutcomeNotHeld, false
	}
	return OutcomeReleased, false
}

// acquire calls Acquire (in an election run, Campaign for the election
// whose lock is key) with a context that ends after 20 leases, or at
// cancelAt when that is not negative, or when the harness's announcement
// of a release of key makes cancelOnRelease end it. The trace says what
// the call sent.
func (l *loop) acquire(ctx context.Context, key string, cancelAt time.Duration) (holding, *callTrace, error) {
	limit := 20 * l.cfg.TTL
	if cancelAt >= 0 {
		limit = cancelAt
		l.ev.fault(FaultCancel)
	}
	actx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	trace := &callTrace{}
	actx = context.WithValue(actx, callKey{}, trace)
	p := &pendingAcquire{cancel: cancel}
	l.waits.add(key, p)
	defer l.waits.remove(key, p)
	if l.cfg.Locker.Election {
		// ElectionKey(name) is key: key carries name as its hash tag.
		lead, err := l.locker.Campaign(actx, strings.TrimSuffix(key, ".election"), l.name)
		if campaignInDoubt(trace, err) {
			trace.doubt.Store(true)
		}
		if err != nil {
			return nil, trace, err
		}
		return heldLeadership{lead}, trace, nil
	}
	lock, err := l.locker.Acquire(actx, key)
	if err != nil {
		return nil, trace, err
	}
	return heldLock{lock}, trace, nil
}

// campaignInDoubt reports whether a Campaign call that returned err may
// have left a lease on its key that nobody reports. A lock Campaign won
// and gave up (its record not published: an EXECABORT under OOM, a
// context that ended while publishing, a lease that ran out first) is
// resigned on a best-effort basis: a Resign refused or cut off leaves that
// lease on the key to its end, unknown to the history (seen: free waits of
// 292ms and, with the context ended, 321ms). So a Campaign that fails
// after a win, or wins after giving one up, is a write in doubt. A failure
// of another kind than ErrNotAcquired comes only after a win, whether or
// not the trace saw it.
func campaignInDoubt(trace *callTrace, err error) bool {
	wins := trace.wins.Load()
	return wins > 1 || (err != nil && (wins > 0 || !errors.Is(err, setnxlock.ErrNotAcquired)))
}

// release releases the lock, trying again after network errors as the
// README allows, and names the outcome for the report.
func (l *loop) release(ctx context.Context, lock holding) string {
	for range 3 {
		rctx, cancel := context.WithTimeout(ctx, 5*l.cfg.ReadTimeout)
		outcome, retry := lock.release(rctx)
		cancel()
		if !retry {
			return outcome
		}
	}
	return OutcomeError
}

// lossWatch is how a holder that works until told learns of its loss: a
// goroutine that waits for its Lock's Done and notes the instant, and the
// lease end the Lock stated then, until the section ends.
type lossWatch struct {
	signalled chan struct{} // closed once Done was seen closed; at and leaseEnd are set before
	ended     chan struct{} // closed when the section ends
	exited    chan struct{} // closed when the goroutine returns
	at        time.Time     // when Done was seen closed, wall clock
	leaseEnd  time.Time     // ExpiresAt then, by the holder's clock
}

func watchLoss(lock holding) *lossWatch {
	w := &lossWatch{signalled: make(chan struct{}), ended: make(chan struct{}), exited: make(chan struct{})}
	done := lock.Done()
	go func() {
		defer close(w.exited)
		select {
		case <-done:
			w.at, w.leaseEnd = time.Now(), lock.ExpiresAt()
			close(w.signalled)
		case <-w.ended:
		}
	}()
	return w
}

// told reports whether the holder has been told of its loss.
func (w *lossWatch) told() bool {
	select {
	case <-w.signalled:
		return true
	default:
		return false
	}
}

// sleep works for d, or until told of the loss.
func (w *lossWatch) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.signalled:
	}
}

// stop ends the watch with the section and waits for its goroutine.
func (w *lossWatch) stop() {
	close(w.ended)
	<-w.exited
}

// waiting is a client's Acquire calls in progress, by key, for the faults
// that end them.
type waiting struct {
	mu    sync.Mutex
	byKey map[string]map[*pendingAcquire]struct{}
	n     int
}

// pendingAcquire is one Acquire in progress.
type pendingAcquire struct{ cancel context.CancelFunc }

func (w *waiting) add(key string, p *pendingAcquire) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byKey[key] == nil {
		w.byKey[key] = map[*pendingAcquire]struct{}{}
	}
	w.byKey[key][p] = struct{}{}
	w.n++
}

func (w *waiting) remove(key string, p *pendingAcquire) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byKey[key], p)
	w.n--
}

// on returns the Acquire calls waiting on key now.
func (w *waiting) on(key string) []*pendingAcquire {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*pendingAcquire, 0, len(w.byKey[key]))
	for p := range w.byKey[key] {
		out = append(out, p)
	}
	return out
}

func (w *waiting) any() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n > 0
}

// closeWhileWaiting calls Locker.Close at random moments while one of the
// client's Acquire calls waits: the Locker must stay usable, and its
// waiters must still be served.
func closeWhileWaiting(ctx context.Context, locker *setnxlock.Locker, waits *waiting, ev *eventConn, every time.Duration, rng *rand.Rand) {
	for {
		if sleep(ctx, time.Duration(rng.ExpFloat64()*float64(every))) != nil {
			return
		}
		if waits.any() {
			_ = locker.Close()
			ev.fault(FaultClose)
		}
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// callKey is the context key of an Acquire call's trace.
type callKey struct{}

// callTrace is what the client hook learns about one Acquire call from
// the commands sent under its context.
type callTrace struct {
	sent  atomic.Int64 // when it last sent a command that can win a lock (Unix ns)
	doubt atomic.Bool  // a command that can write the key failed without a reply
	wins  atomic.Int32 // Campaign: how often its Acquire won inside the call (leaderRead)
}

// leaderRead reports whether cmd is Campaign's read of an election's
// record: publish sends it once for each lock its Acquire won, before it
// writes the record (setnxlock.LeaderKey names the record "<name>.leader").
func leaderRead(cmd redis.Cmder) bool {
	if cmd.Name() != "get" || len(cmd.Args()) != 2 {
		return false
	}
	key, _ := cmd.Args()[1].(string)
	return strings.HasSuffix(key, ".leader")
}

// sentAt is when the call last sent a command that can win a lock, or
// fallback if it sent none.
func (t *callTrace) sentAt(fallback time.Time) time.Time {
	if n := t.sent.Load(); n != 0 && n <= fallback.UnixNano() {
		return time.Unix(0, n)
	}
	return fallback
}

// inDoubt reports whether a command or transaction that failed with err
// may have been applied all the same: it got no reply at all, as opposed
// to an error reply or a nil.
func inDoubt(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// readOnly lists the commands an attempt sends that never write its key.
var readOnly = map[string]bool{"get": true, "ping": true, "hello": true, "auth": true, "client": true, "subscribe": true, "cluster": true, "command": true}

// traceHook fills the trace (callKey) of the Acquire call whose context a
// command carries: when it sent a command that can win a lock — a
// pipeline or transaction (the fenced SETNX, the watched takeover), a
// script (the one-round-trip path), or a bare SETNX — and whether one of
// its writes may have been applied without its reply reaching the
// Locker. Read when Acquire returns, the first is when the winning command
// was sent: a lower bound of the instant the lock was won, which the
// token-order check needs. The PEXPIRE that follows a win is not counted,
// since it is sent after it. A command sent under a context that has
// already ended is never sent, so never in doubt.
//
// A write is in doubt when it failed without a reply, and also when it
// took longer than retried: go-redis retries a command whose reply timed
// out inside the call this hook wraps, so a SETNX applied by its first
// try and answered 0 by its retry looks like a plain refusal here. With
// a token the Locker recognises its own value on the next read (H5); a
// bare timestamp is nobody's in particular, so its writer waits out its
// own lease, and that lease must count as in doubt, not as a free wait
// (seen in formats mode: a 988ms wait on a UnixSeconds value its own
// waiter had written).
type traceHook struct {
	retried time.Duration // a command that took this long may have been sent twice; 0: never retried
}

// retriedAfter is how long a command takes at least when go-redis retried
// it: a read timeout.
func retriedAfter(cfg WorkerConfig) time.Duration {
	if cfg.MaxRetries < 0 {
		return 0
	}
	return cfg.ReadTimeout
}

// doubt reports whether a write that returned err after took may have
// been applied unknown to its sender.
func (h traceHook) doubt(err error, took time.Duration) bool {
	return inDoubt(err) || (h.retried > 0 && took >= h.retried)
}

// DialHook, ProcessHook and ProcessPipelineHook make traceHook a
// redis.Hook.
func (traceHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h traceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		trace, _ := ctx.Value(callKey{}).(*callTrace)
		if trace == nil {
			return next(ctx, cmd)
		}
		start := time.Now()
		switch cmd.Name() {
		case "eval", "evalsha", "setnx": // the commands that can win a lock on their own
			trace.sent.Store(start.UnixNano())
		}
		if leaderRead(cmd) {
			trace.wins.Add(1)
		}
		sent := ctx.Err() == nil
		err := next(ctx, cmd)
		if sent && !readOnly[cmd.Name()] && h.doubt(err, time.Since(start)) {
			trace.doubt.Store(true)
		}
		return err
	}
}
func (h traceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		trace, _ := ctx.Value(callKey{}).(*callTrace)
		if trace == nil || !writes(cmds) {
			return next(ctx, cmds)
		}
		start := time.Now()
		trace.sent.Store(start.UnixNano())
		sent := ctx.Err() == nil
		err := next(ctx, cmds)
		if sent && h.doubt(err, time.Since(start)) {
			trace.doubt.Store(true)
		}
		return err
	}
}

// writes reports whether a pipeline holds a command that can write: not
// the setup of a new connection (HELLO, AUTH, CLIENT), which go-redis
// sends as a pipeline under the context of the call that dialled, and
// which once stamped a fencing Acquire's win 545ms late, after a SIGSTOP
// (a wake-up subscription dialled under the Acquire's context), so that
// the token-order check took a token drawn before the stop for one drawn
// after it.
func writes(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if !readOnly[cmd.Name()] {
			return true
		}
	}
	return false
}

// HungUp reports whether err is the harness closing the resource
// connection, which is how a run ends for a client.
func HungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// oneLine makes an error fit on one protocol line.
func oneLine(err error) string {
	s := []byte(err.Error())
	for i, c := range s {
		if c == '\n' || c == '\r' {
			s[i] = ' '
		}
	}
	return string(s)
}
