// Package faultproxy is a loopback TCP proxy between Redis clients and a
// Redis server that injects network faults below the client library: a
// command reaches the server and is applied, but its reply never comes
// back; a request is delayed; a request is held back past the client's
// timeout and lands after the client's later requests; a connection is
// cut. Unlike a go-redis hook it
// is invisible to go-redis, so the client's own timeouts, reconnects and
// retries run exactly as in production.
//
// Faults are chosen two ways: by a rule a test sets (LoseReplies), to hit
// one exact command, or at random (Faults), for fault-injection runs. The
// random draws come from one generator per connection, seeded from the
// run's seed and the connection's number, so a run's fault schedule follows
// from its seed.
package faultproxy

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// The proxy itself: listening, dialling the server for each connection it
// accepts, and closing.

// Proxy forwards every connection to the target server. Start stops it when
// the test ends; New leaves that to Close.
type Proxy struct {
	listener net.Listener
	target   string
	wg       sync.WaitGroup

	mu     sync.Mutex
	seen   map[string]int // requests forwarded, by lower-case command name
	lose   func(command string, nth int) bool
	loseTo func(args []string) bool
	holdTo func(args []string) time.Duration
	faults Faults
	stats  Stats
	nconn  uint64                // connections accepted so far, numbering each one's fault draws
	conns  map[net.Conn]struct{} // open connections on both sides, closed by Close
	thawed chan struct{}         // closed while bytes flow; open (blocking every forwarder) while frozen
	// received numbers every request in the order the proxy read it, on
	// any connection; latest holds, by client name, the largest number of
	// a request of that client forwarded to the server so far. A request
	// forwarded while latest holds a larger number was overtaken by a
	// later request of its client.
	received uint64
	latest   map[string]uint64
}

// Start listens on a free loopback port and forwards to target, injecting
// no fault until LoseReplies or SetFaults says so. It stops when the test
// ends.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := New(target, Faults{})
	if err != nil {
		tb.Fatalf("faultproxy: %v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

// New listens on a free loopback port and forwards to target with the
// given random faults, for programs that are not tests. Close stops it.
func New(target string, faults Faults) (*Proxy, error) {
	if err := faults.validate(); err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{listener: listener, target: target, seen: map[string]int{}, faults: faults, conns: map[net.Conn]struct{}{}, thawed: closedGate(),
		latest: map[string]uint64{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients should dial.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Close stops accepting, cuts every open connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() {
	p.Thaw() // frozen forwarders go on to find their connections closed
	_ = p.listener.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close() // the server is down (restarting): the client sees the connection end
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.nconn++
		rng := rand.New(rand.NewPCG(p.faults.Seed, p.nconn))
		p.mu.Unlock()
		var blackholed, cut sync.Once
		swallow := make(chan struct{})
		c := &conn{
			client: client, server: server, rng: rng,
			blackhole: func() { blackholed.Do(func() { close(swallow) }) },
			cut: func() {
				cut.Do(func() {
					_ = client.Close()
					_ = server.Close()
				})
			},
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer p.forget(server)
			p.forwardRequests(c)
		}()
		go func() {
			defer p.wg.Done()
			defer p.forget(client)
			p.forwardReplies(server, client, swallow)
		}()
	}
}

// forget closes one side of a connection and stops tracking it, so that a
// long run with many reconnections does not accumulate closed connections.
func (p *Proxy) forget(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
