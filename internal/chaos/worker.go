package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
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
	Redis    string   // host:port of the fault proxy in front of redis-server
	Resource string   // the unix socket of the harness's resource
	Keys     []string // the lock keys it picks from at random
	Seed     uint64   // the run's seed; the worker's choices draw from its own stream of it
	Offset   time.Duration

	TTL, Margin            time.Duration
	MinBackoff, MaxBackoff time.Duration
	ReadTimeout            time.Duration // go-redis read and write timeouts: how long a lost reply stalls a command
	MaxRetries             int           // go-redis retries of a command after a network error (-1: none)
	LongHoldRate           float64       // share of critical sections that work until the very end of the lease
	NoScripts              bool          // WithoutScripts: only the classic commands
}

// errCrashed is RunWorker's error when the harness told it to crash.
var errCrashed = errors.New("chaos: told to crash")

// RunWorker locks keys until ctx ends or the harness hangs up: acquire,
// report, write to the resource under the lock's fencing token, release,
// report. It returns errCrashed, holding its last lock and never releasing
// it, when the harness tells it to crash.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	res, err := dialResource(cfg.Resource, cfg.Name)
	if err != nil {
		return fmt.Errorf("chaos: %s: resource: %w", cfg.Name, err)
	}
	defer res.close()
	// A crash closes our connections: a real crash would not leave them
	// to the server's timeout either.
	client := redis.NewClient(&redis.Options{
		Addr: cfg.Redis, PoolSize: 2, MaxRetries: cfg.MaxRetries,
		DialTimeout: 2 * cfg.ReadTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.ReadTimeout,
	})
	defer client.Close()
	sent := &sentHook{}
	client.AddHook(sent)
	clock := SkewedClock{Offset: cfg.Offset}
	opts := []setnxlock.Option{
		setnxlock.WithTTL(cfg.TTL), setnxlock.WithClock(clock), setnxlock.WithFencing(),
		setnxlock.WithSkewMargin(cfg.Margin), setnxlock.WithBackoff(cfg.MinBackoff, cfg.MaxBackoff),
	}
	if cfg.NoScripts {
		opts = append(opts, setnxlock.WithoutScripts())
	}
	locker, err := setnxlock.New(client, opts...)
	if err != nil {
		return err
	}
	w := &worker{cfg: cfg, res: res, locker: locker, clock: clock, sent: sent, rng: streamFor(cfg.Seed, "worker/"+cfg.Name)}
	for ctx.Err() == nil {
		if err := w.once(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// worker is RunWorker's state.
type worker struct {
	cfg    WorkerConfig
	res    *resourceConn
	locker *setnxlock.Locker
	clock  SkewedClock
	sent   *sentHook
	rng    interface {
		IntN(int) int
		Float64() float64
	}
	seq int64
}

// once is one acquisition and its critical section. It returns an error
// only when the worker must stop.
func (w *worker) once(ctx context.Context) error {
	key := w.cfg.Keys[w.rng.IntN(len(w.cfg.Keys))]
	long := w.rng.Float64() < w.cfg.LongHoldRate
	writes := 1 + w.rng.IntN(3)

	actx, cancel := context.WithTimeout(ctx, 20*w.cfg.TTL)
	lock, err := w.locker.Acquire(actx, key)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_, err := w.res.call("fail", oneLine(err))
		return err
	}
	granted := time.Now()
	w.seq++
	seq := strconv.FormatInt(w.seq, 10)
	token := strconv.FormatInt(lock.FencingToken(), 10)
	leaseEnd := lock.ExpiresAt().Add(-w.cfg.Offset) // our clock's instant back on the wall clock
	if _, err := w.res.call("acq", seq, key, token, nanos(w.sent.at(granted)), nanos(granted), nanos(leaseEnd)); err != nil {
		return err
	}

	// The critical section: writes to the resource, each only while the
	// lease is live by our own clock, as the README asks of a holder. A
	// write still in flight when the lease ends is what fencing is for.
	for i := 0; long || i < writes; i++ {
		if !w.clock.Now().Before(lock.ExpiresAt()) {
			break
		}
		reply, err := w.res.call("op", seq, key, token)
		if err != nil {
			return err
		}
		if reply == replyCrash {
			return errCrashed // the lock is never released
		}
		if reply == replyStale {
			break // fenced out: a later holder has written
		}
		if long {
			time.Sleep(w.cfg.TTL / 8)
		}
	}

	// On record before the release is sent, so before anyone else can be
	// granted the key: a run that stops mid-release cannot lose it.
	if _, err := w.res.call("done", seq, nanos(time.Now())); err != nil {
		return err
	}
	_, err = w.res.call("rel", seq, w.release(ctx, lock))
	return err
}

// release releases the lock, trying again after network errors as the
// README allows, and names the outcome for the report.
func (w *worker) release(ctx context.Context, lock *setnxlock.Lock) string {
	var err error
	for range 3 {
		rctx, cancel := context.WithTimeout(ctx, 5*w.cfg.ReadTimeout)
		err = lock.Release(rctx)
		cancel()
		switch {
		case err == nil:
			return "released"
		case errors.Is(err, setnxlock.ErrNotHeld):
			return "not-held"
		}
	}
	return "error"
}

// sentHook remembers when the client last sent a command that can win a
// lock: a pipeline or transaction (the fenced SETNX, the watched
// takeover), a script (the one-round-trip path), or a bare SETNX. Read
// right after Acquire returns, it is when the winning command was sent: a
// lower bound of the instant the lock was won, which the token-order check
// needs. The PEXPIRE that follows a win is not counted, since it is sent
// after it.
type sentHook struct{ last atomic.Int64 }

func (h *sentHook) at(fallback time.Time) time.Time {
	if n := h.last.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return fallback
}

// DialHook, ProcessHook and ProcessPipelineHook make sentHook a
// redis.Hook.
func (h *sentHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "eval", "evalsha", "setnx": // the commands that can win a lock on their own
			h.last.Store(time.Now().UnixNano())
		}
		return next(ctx, cmd)
	}
}
func (h *sentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.last.Store(time.Now().UnixNano())
		return next(ctx, cmds)
	}
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
