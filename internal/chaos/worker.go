package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock"
)

// A lock client: its configuration, and its Locker over a client of the
// fault proxies, shared by its acquisition loops (loop.go).

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
	Claims            ClaimFaults   // the heard mode's faults, injected below go-redis (claimfaults.go)
}

// errCrashed is RunWorker's error when the harness told it to crash.
var errCrashed = errors.New("chaos: told to crash")

// RunWorker locks keys until ctx ends or the harness hangs up, in
// cfg.Loops loops sharing one Locker: acquire, report, run the critical
// section under checks of the lease, release, report. It returns
// errCrashed, holding its locks and never releasing them, when the harness
// tells one loop to crash.
func RunWorker(parent context.Context, cfg WorkerConfig) error {
	ev, err := dialEvents(cfg.Resource, cfg.Name)
	if err != nil {
		return fmt.Errorf("chaos: %s: events: %w", cfg.Name, err)
	}
	defer ev.close()
	var claims *claimFaults
	if cfg.Claims.any() {
		claims = newClaimFaults(cfg.Claims, cfg.Seed, cfg.Name, func(kind, key string) {
			if kind == claimInDoubt {
				ev.send(fmt.Sprintf("doubt %s %d", key, time.Now().UnixNano()))
				return
			}
			ev.fault(kind)
		})
	}
	client := newRedisClient(cfg, claims)
	defer client.Close()
	hook := traceHook{retried: retriedAfter(cfg)}
	if cfg.Locker.Semaphore != "" || cfg.Locker.Multi {
		hook.keys = map[string]bool{}
		for _, k := range cfg.Keys {
			hook.keys[k] = true
		}
	}
	client.AddHook(hook)
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
	first := firstError(errs, cfg.Loops)
	ev.close() // ends cancelOnRelease
	cancel(nil)
	wg.Wait()
	if parent.Err() != nil {
		return nil
	}
	return first
}

// firstError receives n errors from errs and returns the first that is
// not nil.
func firstError(errs <-chan error, n int) error {
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil { // bounded: every loop sends once
			first = err
		}
	}
	return first
}

// newRedisClient connects to the proxy in front of the server, or to the
// Cluster's nodes through theirs; with claims, each connection to the
// single server carries the heard mode's faults (faultconn.go).
func newRedisClient(cfg WorkerConfig, claims *claimFaults) redis.UniversalClient {
	user, password := cfg.Locker.User, ""
	if user != "" {
		password = cfg.Password
	}
	if !cfg.Cluster {
		opts := &redis.Options{
			Addr: cfg.Redis[0], Username: user, Password: password, PoolSize: 2 + cfg.Loops, MaxRetries: cfg.MaxRetries,
			DialTimeout: 2 * cfg.ReadTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.ReadTimeout,
			ContextTimeoutEnabled: cfg.Locker.ContextTimeout, ClientName: cfg.Name,
		}
		if claims != nil {
			opts.Dialer = claimFaultDialer(claims)
		}
		return redis.NewClient(opts)
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
