package faultproxy

import (
	"bufio"
	"math/rand/v2"
	"net"
	"strings"
	"time"
)

// Forwarding one proxied connection: requests one at a time, each with the
// faults the rules and the random draws choose for it, and the server's
// replies back, until a fault swallows them.

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
