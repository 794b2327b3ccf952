package faultproxy

import (
	"strings"
	"time"
)

// The rules a test sets to hit exact commands: lose the replies after a
// request, hold a request back; and the count of requests forwarded.

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
