package chaos

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The faults of the heard mode, which a client injects below its own
// go-redis client (faultconn.go), where it sees both what it sends and the
// messages it receives: a handoff message held up on arrival (its
// subscription connection stalls), and the claim that follows a handoff
// delayed, dropped or its reply lost. The fault proxy sees only requests,
// one at a time: it can neither read a handoff message nor tell a claim
// from a poll, which take the same script and arguments.

// ClaimFaults are the rates of the heard mode's faults, per client.
type ClaimFaults struct {
	// Per handoff, for every claim that follows it: the queued attempt
	// (queued.lua) or claim script whose entry's token a handoff message
	// to this client named, or on the command path the SET of a value
	// carrying that token (the watched claim's transaction). Each such
	// claim is held back for a uniform draw up to MaxDelay and then sent,
	// whatever the client did meanwhile (past its read timeout it has
	// given up, and the claim lands late, some after the provisional
	// value's end); or never sent; or sent with every later reply on its
	// connection lost. The fate is drawn once per handoff, so that a
	// library that sends its claim again after a failure (H5) sees the
	// claim fail for good, and its Lock must end.
	DelayRate, DropRate, LoseRate float64
	MaxDelay                      time.Duration
	// Per read of the subscription connection that carries a handoff
	// message: the read is held for a uniform draw up to MaxHold before
	// the library sees it, and with it everything behind it.
	HoldRate float64
	MaxHold  time.Duration
}

// any reports whether any of the faults is on.
func (f ClaimFaults) any() bool {
	return f.DelayRate+f.DropRate+f.LoseRate+f.HoldRate > 0
}

// The faults the heard mode's clients inject into themselves and report.
const (
	FaultClaimDelayed = "claim-delayed" // a claim after a handoff held back, then sent
	FaultClaimDropped = "claim-dropped" // a claim after a handoff never sent
	FaultClaimLost    = "claim-lost"    // a claim after a handoff sent, its reply lost
	FaultHandoffHeld  = "handoff-held"  // a handoff message held up on arrival
)

// handedRecall is how long after a handoff message a client treats the
// queued attempts of the token it named as claims: the claim window and
// then some, for a claim tried again after a failure.
const handedRecall = 2 * handoffClaimWindow

// claimFate is what happens to one write of a client.
type claimFate struct {
	kind  string // "" for none, or one of the claim faults
	key   string // the lock key it claims
	delay time.Duration
}

// claimFaults is one client's state: the tokens handoff messages named
// lately, and its streams.
type claimFaults struct {
	f      ClaimFaults
	report func(kind, key string) // a fault injected; key is "" for a held message

	mu     sync.Mutex
	handed map[string]handoff // by the token a handoff message named
	claims *lockedRand
	holds  *lockedRand
}

// handoff is one handoff heard: when, and the fate of its claims once
// the first is drawn.
type handoff struct {
	at    time.Time
	drawn bool
	kind  string // "" for none, or one of the claim faults
}

func newClaimFaults(f ClaimFaults, seed uint64, client string, report func(kind, key string)) *claimFaults {
	return &claimFaults{f: f, report: report, handed: map[string]handoff{},
		claims: lockedStream(seed, "claim-faults/"+client), holds: lockedStream(seed, "handoff-holds/"+client)}
}

// heard notes the handoff messages in data, read from a subscription
// connection, and returns how long to hold the read up.
func (c *claimFaults) heard(data []byte) time.Duration {
	tokens := handoffTokens(data)
	if len(tokens) == 0 {
		return 0
	}
	now := time.Now()
	c.mu.Lock()
	for t, h := range c.handed {
		if now.Sub(h.at) > handedRecall {
			delete(c.handed, t)
		}
	}
	for _, t := range tokens {
		c.handed[t] = handoff{at: now}
	}
	c.mu.Unlock()
	x, length := c.holds.float64(), c.holds.float64()
	if x >= c.f.HoldRate {
		return 0
	}
	c.report(FaultHandoffHeld, "")
	return time.Duration(length * float64(c.f.MaxHold))
}

// fate is the fault of a write that carries a claim after a handoff,
// drawn at the handoff's first claim; other writes pass untouched.
func (c *claimFaults) fate(data []byte) claimFate {
	key, kind, ok := c.claimIn(data)
	if !ok || kind == "" {
		return claimFate{}
	}
	out := claimFate{key: key, kind: kind}
	if kind == FaultClaimDelayed {
		out.delay = time.Duration(c.claims.float64() * float64(c.f.MaxDelay))
	}
	c.report(out.kind, key)
	return out
}

// claimIn finds, among the commands of one write, a claim of a token a
// handoff message named lately, and returns its lock key and the fate of
// that handoff's claims.
func (c *claimFaults) claimIn(data []byte) (key, kind string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.handed) == 0 {
		return "", "", false
	}
	for _, args := range parseCommands(data) {
		key, token, ok := claimOf(args)
		if !ok {
			continue
		}
		if h, ok := c.handed[token]; ok && time.Since(h.at) <= handedRecall {
			if !h.drawn {
				h.drawn, h.kind = true, c.draw()
				c.handed[token] = h
			}
			return key, h.kind, true
		}
	}
	return "", "", false
}

// draw is the fate of one handoff's claims.
func (c *claimFaults) draw() string {
	switch x, f := c.claims.float64(), c.f; {
	case x < f.DelayRate:
		return FaultClaimDelayed
	case x < f.DelayRate+f.DropRate:
		return FaultClaimDropped
	case x < f.DelayRate+f.DropRate+f.LoseRate:
		return FaultClaimLost
	}
	return ""
}

// claimOf reads the token a command would claim a key with: the queued
// attempt's script (queuedAttempt), a claim script (claimScript), or a
// plain SET of a value "<end>:<token>" (or "<end>:<token>|<identity>",
// tokenOf), which on the command path only
// the watched claim sends (acquisitions use SET NX or SETNX, releases
// write another waiter's token or delete).
func claimOf(args []string) (key, token string, ok bool) {
	switch {
	case len(args) == 0:
		return "", "", false
	case queuedAttempt(args) || claimScript(args):
		return args[3], args[8], true
	case strings.EqualFold(args[0], "set") && len(args) == 3 && !strings.HasSuffix(args[1], ".waiters"):
		token := tokenOf(args[2])
		return args[1], token, token != ""
	}
	return "", "", false
}

// claimScript recognises the claim of a handoff heard where claims are
// a script of their own (issue 24's claim.lua, EVAL or EVALSHA): the
// lock key and its queue, then our value, the safety net, our entry
// "<Locker id>:<token>", the entry's token, which the value carries
// (tokenOf), and our value's end.
func claimScript(args []string) bool {
	if len(args) != 10 || args[2] != "2" {
		return false
	}
	name := strings.ToLower(args[0])
	return (name == "evalsha" || name == "eval") && claimsEntry(args)
}

// claimsEntry reports whether a script's arguments name the lock key and
// its queue, and pass our value, the safety net, our entry and the
// entry's token, carried by the value, as queued.lua and claim.lua do.
func claimsEntry(args []string) bool {
	argv := args[5:]
	token := argv[3]
	return strings.HasSuffix(args[4], ".waiters") && token != "" && !strings.Contains(token, ":") &&
		strings.HasSuffix(argv[2], ":"+token) && tokenOf(argv[0]) == token
}

// handoffPrefix begins every handoff channel's name (the library's
// handoffChannelPrefix): "setnxlock:handoff:<Locker id>".
var handoffPrefix = []byte("setnxlock:handoff:")

// handoffTokens reads the tokens named by the handoff messages in data,
// a chunk of a subscription connection's replies: after each channel name
// with the prefix comes the payload, "<token>:<key>" (or, with issue 24's
// provisional holds, "<token>:<end>:<key>"), as a bulk string.
// (The chaos keys hold no separator.)
// A message cut by the chunk's end is not read.
func handoffTokens(data []byte) []string {
	var out []string
	for {
		i := bytes.Index(data, handoffPrefix)
		if i < 0 {
			return out
		}
		data = data[i+len(handoffPrefix):]
		end := bytes.Index(data, []byte("\r\n"))
		if end < 0 {
			return out
		}
		payload, rest, ok := bulkString(data[end+2:])
		if !ok {
			return out
		}
		data = rest
		// "<token>::<key>" is a wake-up on the waiter's channel, to race
		// for a key left free: no handoff, no claim follows.
		if parts := strings.SplitN(payload, ":", 3); len(parts) >= 2 && parts[0] != "" && !(len(parts) == 3 && parts[1] == "") {
			out = append(out, parts[0])
		}
	}
}

// bulkString reads "$<n>\r\n<n bytes>\r\n" from the start of data.
func bulkString(data []byte) (s string, rest []byte, ok bool) {
	if len(data) == 0 || data[0] != '$' {
		return "", nil, false
	}
	end := bytes.Index(data, []byte("\r\n"))
	if end < 0 {
		return "", nil, false
	}
	n, err := strconv.Atoi(string(data[1:end]))
	if err != nil || n < 0 || len(data) < end+2+n+2 {
		return "", nil, false
	}
	return string(data[end+2 : end+2+n]), data[end+2+n+2:], true
}

// parseCommands reads the commands in data, each an array of bulk strings
// as go-redis sends them; it stops at anything else, or at a command cut
// by the chunk's end.
func parseCommands(data []byte) [][]string {
	var out [][]string
	for len(data) > 0 && data[0] == '*' {
		end := bytes.Index(data, []byte("\r\n"))
		if end < 0 {
			return out
		}
		n, err := strconv.Atoi(string(data[1:end]))
		if err != nil || n <= 0 {
			return out
		}
		data = data[end+2:]
		args := make([]string, 0, n)
		for range n {
			s, rest, ok := bulkString(data)
			if !ok {
				return out
			}
			args, data = append(args, s), rest
		}
		out = append(out, args)
	}
	return out
}
