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
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

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

// LoseReplies sets the fault rule: when it returns true for a request (its
// command name and how many requests of that name the proxy has seen,
// counting from 1), the request is still forwarded and applied, but from
// then on nothing the server sends on that connection reaches the client.
// The client sees a read timeout. A nil rule loses nothing.
func (p *Proxy) LoseReplies(rule func(command string, nth int) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = rule
}

// LoseRepliesTo sets a second fault rule, which sees every argument of a
// request (the command name first, as sent): when it returns true the
// request is forwarded and applied, and nothing more the server sends on
// that connection reaches the client, as with LoseReplies. It is called
// with the proxy's lock held, one request at a time, so it may keep state
// of its own without locking. A nil rule loses nothing.
func (p *Proxy) LoseRepliesTo(rule func(args []string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseTo = rule
}

// HoldRequestsTo sets a rule that holds requests back: when it returns a
// positive duration for a request (every argument, the command name
// first), the request is kept in the proxy that long and then forwarded,
// as with Faults.HoldRate, and counted in Stats.Held. It is called with
// the proxy's lock held, one request at a time, like LoseRepliesTo. A nil
// rule holds nothing.
func (p *Proxy) HoldRequestsTo(rule func(args []string) time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdTo = rule
}

// Count returns how many requests of a command the proxy has forwarded.
func (p *Proxy) Count(command string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[strings.ToLower(command)]
}

// Freeze stops every byte in both directions, on open connections and on
// those accepted while frozen, without closing anything: to the client the
// server has gone silent, as behind a partition or a stalled switch, and
// only its own timeouts end a request. What was sent meanwhile is delivered
// by Thaw, in order.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // frozen already
	}
}

// Thaw lets the bytes held since Freeze flow again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// awaitThaw returns once the proxy is not frozen.
func (p *Proxy) awaitThaw() {
	p.mu.Lock()
	gate := p.thawed
	p.mu.Unlock()
	<-gate
}

func closedGate() chan struct{} { c := make(chan struct{}); close(c); return c }

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

// conn is one proxied connection and its fault draws.
type conn struct {
	client, server net.Conn
	rng            *rand.Rand // only the request goroutine draws from it
	name           string     // the client's name, once it sets one; only the request goroutine uses it
	blackhole      func()     // swallow every later reply
	cut            func()     // close both sides
}

// forwardRequests copies requests one at a time, so that the fault rules
// see each command, and applies the faults they choose before or after
// forwarding it.
func (p *Proxy) forwardRequests(c *conn) {
	in := bufio.NewReader(c.client)
	for {
		raw, args, err := readRequest(in)
		if err != nil {
			return
		}
		command := strings.ToLower(args[0])
		if name, ok := clientName(args); ok {
			c.name = name
		}
		p.mu.Lock()
		p.received++
		number := p.received
		p.seen[command]++
		lose := p.lose != nil && p.lose(command, p.seen[command])
		if p.loseTo != nil && p.loseTo(args) {
			lose = true
			p.stats.Lost++
		}
		f := p.faults.draw(c.rng)
		if p.holdTo != nil {
			if d := p.holdTo(args); d > 0 {
				f.hold = d
			}
		}
		lose = lose || f.lose
		p.stats.add(f)
		p.mu.Unlock()
		if f.delay+f.hold > 0 {
			time.Sleep(f.delay + f.hold)
		}
		if f.cut == cutBefore {
			c.cut() // never reaches the server
			return
		}
		if lose {
			c.blackhole()
		}
		p.awaitThaw()
		if _, err := c.server.Write(raw); err != nil {
			return
		}
		p.forwarded(c.name, number, f.hold > 0)
		if f.cut == cutAfter {
			c.cut() // reaches the server, which may apply it; the reply cannot come back
			return
		}
	}
}

// forwarded notes that the request the proxy read as number, from the
// named client, has been written to the server: a held one is counted as
// overtaken when a later request of its client got there first. Requests
// of a client that never named itself are not compared.
func (p *Proxy) forwarded(name string, number uint64, held bool) {
	if name == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if held && p.latest[name] > number {
		p.stats.Overtaken++
	}
	p.latest[name] = max(p.latest[name], number)
}

// clientName reads the name a client gives its connection: CLIENT SETNAME
// <name>, or HELLO's SETNAME <name> option.
func clientName(args []string) (string, bool) {
	switch strings.ToLower(args[0]) {
	case "client":
		if len(args) == 3 && strings.EqualFold(args[1], "setname") {
			return args[2], true
		}
	case "hello":
		for i := 1; i+1 < len(args); i++ {
			if strings.EqualFold(args[i], "setname") {
				return args[i+1], true
			}
		}
	}
	return "", false
}

// forwardReplies copies the server's bytes to the client until swallow is
// closed; after that it keeps reading and discards them. While the proxy
// is frozen, what it read waits.
func (p *Proxy) forwardReplies(server, client net.Conn, swallow <-chan struct{}) {
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		p.awaitThaw()
		select {
		case <-swallow:
		default:
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// readRequest reads one RESP request, a non-empty array of bulk strings,
// and returns its bytes and its arguments, the command name first.
func readRequest(in *bufio.Reader) ([]byte, []string, error) {
	header, err := in.ReadString('\n')
	if err != nil {
		return nil, nil, err
	}
	if !strings.HasPrefix(header, "*") {
		return nil, nil, fmt.Errorf("faultproxy: not a RESP array: %q", header)
	}
	count, err := strconv.Atoi(strings.TrimSpace(header[1:]))
	if err != nil {
		return nil, nil, err
	}
	if count < 1 {
		return nil, nil, fmt.Errorf("faultproxy: empty request")
	}
	raw := []byte(header)
	args := make([]string, 0, count)
	for range count {
		sizeLine, err := in.ReadString('\n')
		if err != nil {
			return nil, nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(sizeLine, "$")))
		if err != nil {
			return nil, nil, err
		}
		body := make([]byte, size+2) // the bytes and their CRLF
		if _, err := io.ReadFull(in, body); err != nil {
			return nil, nil, err
		}
		raw = append(append(raw, sizeLine...), body...)
		args = append(args, string(body[:size]))
	}
	return raw, args, nil
}
