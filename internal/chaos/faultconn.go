package chaos

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A client's connections to its fault proxy, wrapped so that the client can
// inject the heard mode's faults (claimfaults.go) below go-redis: go-redis's
// timeouts, reconnects and retries then run as in production, as they do
// for the proxy's faults.

// claimFaultDialer dials addr (go-redis's Dialer) and wraps each
// connection in the client's claim faults.
func claimFaultDialer(c *claimFaults) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var dialer net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &faultConn{Conn: conn, faults: c}, nil
	}
}

// faultConn is one connection of a client with the heard mode's faults.
// go-redis writes a command (or a pipeline) and reads its reply before it
// writes again, and closes a connection whose read timed out; a
// subscription connection, once it has subscribed, only reads.
type faultConn struct {
	net.Conn
	faults *claimFaults

	subscriber atomic.Bool // it has sent SUBSCRIBE: it carries messages
	swallow    atomic.Bool // a claim's reply is lost: every later reply is

	mu      sync.Mutex
	held    chan struct{} // open while a held write waits to go out; nil if none
	closing bool          // closed by go-redis while a write was held
}

// Write sends b, unless it carries a claim after a handoff that the
// faults delay, drop, or send with its reply lost. A delayed claim goes
// out later on the same connection, whatever go-redis did meanwhile: past
// its read timeout go-redis has closed the connection, and the claim
// still lands, late (as the proxy's held requests do, H10).
func (c *faultConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	held := c.held
	c.mu.Unlock()
	if held != nil {
		<-held // bounded: a held write goes out within MaxDelay
	}
	if !c.subscriber.Load() && subscribes(b) {
		c.subscriber.Store(true)
	}
	fate := c.faults.fate(b)
	switch fate.kind {
	case FaultClaimDropped:
		return len(b), nil // never reaches the server; the reply never comes
	case FaultClaimLost:
		c.swallow.Store(true)
		c.faults.report(claimInDoubt, fate.key)
		return c.Conn.Write(b)
	case FaultClaimDelayed:
		out := make(chan struct{})
		c.mu.Lock()
		c.held = out
		c.mu.Unlock()
		go c.sendLate(append([]byte(nil), b...), fate, out)
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// sendLate sends a held claim after its delay. If go-redis closed the
// connection meanwhile (its read timed out), the claim lands unknown to
// the client, a claim in doubt, and the connection is closed once the
// server has answered it.
func (c *faultConn) sendLate(b []byte, fate claimFate, out chan struct{}) {
	time.Sleep(fate.delay)
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if closing {
		c.faults.report(claimInDoubt, fate.key)
	}
	_ = c.Conn.SetWriteDeadline(time.Time{}) // go-redis's, for the write it thinks it made, has passed
	_, err := c.Conn.Write(b)
	c.mu.Lock()
	c.held = nil
	closing = c.closing
	c.mu.Unlock()
	close(out)
	if closing {
		if err == nil {
			// Let the server read it before the connection ends.
			_ = c.Conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Conn.Read(make([]byte, 512))
		}
		_ = c.Conn.Close()
	}
}

// Read reads replies, swallowing them once a claim's reply is lost (until
// go-redis's read deadline ends the read), and on a subscription
// connection notes the handoff messages it carries, holding the read up
// when the faults say so.
func (c *faultConn) Read(p []byte) (int, error) {
	if c.swallow.Load() {
		scratch := make([]byte, 4096)
		for {
			if _, err := c.Conn.Read(scratch); err != nil {
				return 0, err
			}
		}
	}
	n, err := c.Conn.Read(p)
	if n > 0 && c.subscriber.Load() {
		if hold := c.faults.heard(p[:n]); hold > 0 {
			time.Sleep(hold)
		}
	}
	return n, err
}

// Close closes the connection, or, while a claim is held, leaves that to
// the held claim once it has gone out.
func (c *faultConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != nil {
		c.closing = true
		return nil
	}
	return c.Conn.Close()
}

// subscribes reports whether b subscribes its connection to channels.
func subscribes(b []byte) bool {
	for _, args := range parseCommands(b) {
		switch strings.ToLower(args[0]) {
		case "subscribe", "psubscribe", "ssubscribe":
			return true
		}
	}
	return false
}
