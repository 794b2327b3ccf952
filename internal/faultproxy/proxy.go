// Package faultproxy is a loopback TCP proxy between Redis clients and a
// Redis server that injects network faults below the client library: a
// command reaches the server and is applied, but its reply never comes
// back. Unlike a go-redis hook it is invisible to go-redis, so the client's
// own timeouts, reconnects and retries run exactly as in production.
package faultproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Proxy forwards every connection to the target server. It stops when the
// test ends.
type Proxy struct {
	listener net.Listener
	target   string
	wg       sync.WaitGroup

	mu    sync.Mutex
	seen  map[string]int // requests forwarded, by lower-case command name
	lose  func(command string, nth int) bool
	conns []net.Conn
}

// Start listens on a free loopback port and forwards to target.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("faultproxy: %v", err)
	}
	p := &Proxy{listener: listener, target: target, seen: map[string]int{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p
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

// Count returns how many requests of a command the proxy has forwarded.
func (p *Proxy) Count(command string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[strings.ToLower(command)]
}

func (p *Proxy) close() {
	_ = p.listener.Close()
	p.mu.Lock()
	for _, c := range p.conns {
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
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		var blackholed sync.Once
		swallow := make(chan struct{})
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer server.Close()
			p.forwardRequests(client, server, func() { blackholed.Do(func() { close(swallow) }) })
		}()
		go func() {
			defer p.wg.Done()
			defer client.Close()
			forwardReplies(server, client, swallow)
		}()
	}
}

// forwardRequests copies requests one at a time, so that the fault rule sees
// each command, and calls blackhole before forwarding a request it matches.
func (p *Proxy) forwardRequests(client, server net.Conn, blackhole func()) {
	in := bufio.NewReader(client)
	for {
		raw, command, err := readRequest(in)
		if err != nil {
			return
		}
		p.mu.Lock()
		p.seen[command]++
		lose := p.lose != nil && p.lose(command, p.seen[command])
		p.mu.Unlock()
		if lose {
			blackhole()
		}
		if _, err := server.Write(raw); err != nil {
			return
		}
	}
}

// forwardReplies copies the server's bytes to the client until swallow is
// closed; after that it keeps reading and discards them.
func forwardReplies(server, client net.Conn, swallow <-chan struct{}) {
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
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

// readRequest reads one RESP request, an array of bulk strings, and returns
// its bytes and its lower-case command name.
func readRequest(in *bufio.Reader) ([]byte, string, error) {
	header, err := in.ReadString('\n')
	if err != nil {
		return nil, "", err
	}
	if !strings.HasPrefix(header, "*") {
		return nil, "", fmt.Errorf("faultproxy: not a RESP array: %q", header)
	}
	count, err := strconv.Atoi(strings.TrimSpace(header[1:]))
	if err != nil {
		return nil, "", err
	}
	raw := []byte(header)
	command := ""
	for i := range count {
		sizeLine, err := in.ReadString('\n')
		if err != nil {
			return nil, "", err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(sizeLine, "$")))
		if err != nil {
			return nil, "", err
		}
		body := make([]byte, size+2) // the bytes and their CRLF
		if _, err := io.ReadFull(in, body); err != nil {
			return nil, "", err
		}
		raw = append(append(raw, sizeLine...), body...)
		if i == 0 {
			command = strings.ToLower(string(body[:size]))
		}
	}
	return raw, command, nil
}
