package setnxlock

// Fuzz targets. Under plain `go test` each replays its f.Add seeds and its
// corpus in testdata/fuzz/<FuzzName>/; `make fuzz` explores beyond them, and
// an input that fails is saved under testdata/fuzz/ to replay from then on.

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// classicValue is the grammar of the values parseExpiry accepts, written
// the obvious way so that the fuzzer can hold the hand-written scanner to
// it: digits, optionally a '.' and more digits, then the end or a suffix
// whose first byte is an ASCII separator (anything ASCII but a letter, a
// digit or '.'). The class lists ASCII bytes explicitly: Go's regexp reads
// runes, and a negated class would accept non-ASCII bytes.
var classicValue = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]+))?(?:[\x00-\x2d\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]|$)`)

// FuzzParseExpiry: no string makes parseExpiry panic; it accepts exactly
// the classicValue grammar within range, reads the instant the number
// states (checked with exact big-number arithmetic), and that instant,
// written again in the unit it was read in, reads back the same.
func FuzzParseExpiry(f *testing.F) {
	for _, seed := range []string{
		"900000000", "900000000123", "900000000.5", "900000000123:7QKZ3VJ4N5A2XH6B3T5YQ2W7LM",
		"99999999999", "100000000000", "99999999999999", "100000000000000",
		"900000000x", "900000000.", ".5", "1.2.3", "-1", "", "9223372036854775808", "900000000\u00e9",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		got, err := parseExpiry(value)

		match := classicValue.FindStringSubmatch(value)
		if match == nil {
			if !errors.Is(err, ErrNotLockValue) {
				t.Fatalf("parseExpiry(%q) = %v, %v; want ErrNotLockValue: no number followed by a separator", value, got, err)
			}
			return
		}
		whole, _ := new(big.Int).SetString(match[1], 10)
		if whole.Cmp(big.NewInt(maxExpiryMillis)) >= 0 {
			if !errors.Is(err, ErrNotLockValue) {
				t.Fatalf("parseExpiry(%q) = %v, %v; want ErrNotLockValue: at or beyond the year 5138", value, got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("parseExpiry(%q): %v; want the instant it states", value, err)
		}

		// Below 1e11 the number is seconds and its fraction counts, cut to
		// the nanosecond; from 1e11 on it is milliseconds and a fraction
		// does not count.
		seconds := whole.Cmp(big.NewInt(secondsMillisBoundary)) < 0
		var want time.Time
		if seconds {
			// The trailing "0" makes "0." + "" a number too.
			fraction, _ := new(big.Rat).SetString("0." + match[2] + "0")
			scaled := fraction.Mul(fraction, big.NewRat(1e9, 1))
			nanos := new(big.Int).Quo(scaled.Num(), scaled.Denom()) // positive: Quo is the floor
			want = time.Unix(whole.Int64(), nanos.Int64())
		} else {
			want = time.UnixMilli(whole.Int64())
		}
		if !got.Equal(want) {
			t.Fatalf("parseExpiry(%q) = %v, want %v", value, got, want)
		}

		// Written again in the unit it was read in, the instant reads the
		// same, with or without a suffix: nothing depends on how the value
		// happened to be spelled.
		again := strconv.FormatInt(got.UnixMilli(), 10)
		if seconds {
			again = fmt.Sprintf("%d.%09d", got.Unix(), got.Nanosecond())
		}
		for _, rewritten := range []string{again, again + ":suffix"} {
			if reread, err := parseExpiry(rewritten); err != nil || !reread.Equal(got) {
				t.Fatalf("parseExpiry(%q) = %v; rewritten as %q it reads %v, %v", value, got, rewritten, reread, err)
			}
		}
	})
}

// The instants a Locker's clock may sensibly read for FuzzFormatRoundTrip:
// from the first millisecond that a millisecond value can be told from
// seconds (1e11 ms, March 1973) up to the year 4000, with leases of up to a
// century, so that every expiry stays below the year 5138 that parseExpiry
// accepts.
const (
	saneFromUnix = secondsMillisBoundary / 1000
	saneToUnix   = 64_060_588_800 // 4000-01-01T00:00:00Z
	maxFuzzTTL   = 100 * 365 * 24 * time.Hour
)

// formatRounding is the most a format's rounding may add to a lease: the
// classic writers' +1 after cutting to their unit. TokenFormat and
// FloatSeconds only cut to the millisecond, so they add nothing.
var formatRounding = map[Format]time.Duration{
	TokenFormat: 0, UnixMillis: time.Millisecond, UnixSeconds: time.Second, FloatSeconds: 0,
}

// FuzzFormatRoundTrip: every format writes a value that parseExpiry reads
// back as exactly the expiry the lease states, a lease is never shorter
// than its TTL by more than the sub-millisecond cut nor longer than the
// format's rounding, and only TokenFormat values carry the owner token and
// the holder's identity. The fuzzer's string is the token, then, after a
// NUL, the identity.
func FuzzFormatRoundTrip(f *testing.F) {
	f.Add(uint8(TokenFormat), int64(900_000_000), uint32(0), int64(10*time.Second), "7QKZ3VJ4N5A2XH6B3T5YQ2W7LM")
	f.Add(uint8(UnixMillis), int64(900_000_000), uint32(999_999_999), int64(time.Millisecond), "")
	f.Add(uint8(UnixSeconds), int64(900_000_000), uint32(999_000_000), int64(1500*time.Millisecond), "token")
	f.Add(uint8(FloatSeconds), int64(900_000_000), uint32(1), int64(time.Millisecond+1), "a:b")
	f.Add(uint8(FloatSeconds), int64(0), uint32(0), int64(0), "")
	f.Add(uint8(TokenFormat), int64(900_000_000), uint32(7), int64(time.Second), "7QKZ3VJ4N5A2XH6B3T5YQ2W7LM\x00web-1:4242")
	f.Add(uint8(UnixMillis), int64(900_000_000), uint32(7), int64(time.Second), "T\x00host:1")
	f.Fuzz(func(t *testing.T, formatByte uint8, unixSeconds int64, nanos uint32, ttlNanos int64, input string) {
		token, identity, _ := strings.Cut(input, "\x00")
		if strings.ContainsRune(token, identitySeparator) || validIdentity(identity) != nil {
			return // no Locker writes these: tokens are base32, identities are checked by New
		}
		format := Format(formatByte % 4)
		now := time.Unix(saneFromUnix+int64(uint64(unixSeconds)%(saneToUnix-saneFromUnix)), int64(nanos%1e9))
		ttl := time.Millisecond + time.Duration(uint64(ttlNanos)%uint64(maxFuzzTTL))

		ls := format.newStamp(now, ttl, token, identity)
		what := fmt.Sprintf("%v.newStamp(%s, %v, %q, %q) = %q ending %s", format,
			now.UTC().Format(time.RFC3339Nano), ttl, token, identity, ls.value, ls.expiry.UTC().Format(time.RFC3339Nano))

		if !ls.start.Equal(now) {
			t.Fatalf("%s: starts at %v, not now", what, ls.start)
		}
		read, err := parseExpiry(ls.value)
		if err != nil || !read.Equal(ls.expiry) {
			t.Fatalf("%s: parseExpiry reads %v, %v", what, read, err)
		}
		if shortest := now.Add(ttl - time.Millisecond); !ls.expiry.After(shortest) {
			t.Fatalf("%s: shorter than the TTL by a millisecond or more", what)
		}
		if formatRounding[format] > 0 && !ls.expiry.After(now.Add(ttl)) {
			t.Fatalf("%s: the classic writer's +1 must make the lease longer than the TTL", what)
		}
		if longest := now.Add(ttl + formatRounding[format]); ls.expiry.After(longest) {
			t.Fatalf("%s: longer than the TTL plus the format's rounding, %v", what, formatRounding[format])
		}
		wantToken, wantIdentity := "", ""
		if format == TokenFormat {
			wantToken, wantIdentity = token, identity
		}
		if got := tokenOf(ls.value); got != wantToken {
			t.Fatalf("%s: tokenOf = %q, want %q", what, got, wantToken)
		}
		if got := identityOf(ls.value); got != wantIdentity {
			t.Fatalf("%s: identityOf = %q, want %q", what, got, wantIdentity)
		}
	})
}

// FuzzOperationSequences drives three clients, each with its own connection
// and Locker on one ManualClock, through a sequence of TryAcquire, Release,
// Refresh and clock moves on two keys of one miniredis, some of them losing
// a reply after the server applied the command (H5). Every outcome is
// checked against a reference model (seqKey and seqLock, kept by seqRun's
// acquire, release and refresh), the server's contents against the model
// after every step, and, apart from the model's bookkeeping, that no two
// Locks believe they hold the same key at once.
//
// Input: three header bytes, then three bytes per operation (see decodeSeq).
func FuzzOperationSequences(f *testing.F) {
	for _, seed := range seqSeeds() {
		f.Add(seed)
	}

	// One server and one connection per client for the whole run, so that
	// an input costs only its round trips; each input starts from an empty
	// server with new Lockers and a new clock.
	server := miniredis.NewMiniRedis()
	if err := server.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(server.Close)
	var clients [seqClients]*seqClient
	for i := range clients {
		c := redis.NewClient(&redis.Options{Addr: server.Addr(), MaxRetries: -1})
		f.Cleanup(func() { _ = c.Close() })
		clients[i] = &seqClient{client: c, loser: loseRepliesOnRequest(c)}
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		server.FlushAll()
		run := newSeqRun(t, server, clients, data)
		for _, op := range run.ops {
			run.step(op)
		}
	})
}

const (
	seqClients = 3
	maxSeqOps  = 64 // keeps one input to a few milliseconds
)

var (
	seqKeys = [...]string{"lock.a", "lock.b"}
	// seqTTLs are the lease lengths Lockers and Refreshes use: shorter than,
	// about, and longer than the one-second rounding of UnixSeconds.
	seqTTLs = [...]time.Duration{5 * time.Millisecond, 100 * time.Millisecond, time.Second, 1500 * time.Millisecond}
	// seqSteps are how far the clock moves at a time: enough small steps to
	// land on and next to expiries, and some that pass whole leases.
	seqSteps = [...]time.Duration{
		time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 40 * time.Millisecond,
		99 * time.Millisecond, 250 * time.Millisecond, 999 * time.Millisecond, 2500 * time.Millisecond,
	}
)

type seqKind int

const (
	opAcquire seqKind = iota
	opRelease
	opRefresh
	opAdvance
	seqKinds
)

// seqOp is one decoded operation.
type seqOp struct {
	kind   seqKind
	client int
	key    int
	// arg picks, for Release and Refresh, one of the client's Locks on the
	// key (0 the newest) in its low bits and, for Refresh, the TTL in bits
	// 4-5; for a clock move the step.
	arg byte
	// lose is 0, or n to lose the reply of the operation's n-th round trip.
	lose int
}

// seqConfig is how each client's Locker is made.
type seqConfig struct {
	format    Format
	ttl       time.Duration
	noScripts bool // WithoutScripts: the classic commands, not the one-round-trip scripts
}

// decodeSeq turns fuzz bytes into the clients' configurations and a list
// of operations. Header byte 0 holds client i's Format in bits 2i and
// 2i+1, byte 1 its TTL (an index into seqTTLs) likewise, and bit i of byte
// 2 makes it use WithoutScripts. Then each operation is three bytes: who
// and what (client = b%3, kind = b/3%4, key = b/12%2), the argument, and
// the fault: when the third byte is 7 mod 8, the reply of round trip
// (b/8)%4+1 of the operation is lost.
func decodeSeq(data []byte) (clients [seqClients]seqConfig, ops []seqOp) {
	var header [3]byte
	copy(header[:], data)
	for i := range clients {
		clients[i] = seqConfig{
			format:    Format(header[0] >> (2 * i) & 3),
			ttl:       seqTTLs[header[1]>>(2*i)&3],
			noScripts: header[2]>>i&1 == 1,
		}
	}
	for rest := data[min(len(header), len(data)):]; len(rest) >= 3 && len(ops) < maxSeqOps; rest = rest[3:] {
		op := seqOp{client: int(rest[0] % seqClients), kind: seqKind(rest[0] / seqClients % byte(seqKinds)),
			key: int(rest[0] / (seqClients * byte(seqKinds)) % byte(len(seqKeys))), arg: rest[1]}
		if rest[2]%8 == 7 && op.kind != opAdvance {
			op.lose = int(rest[2]/8%4) + 1
		}
		ops = append(ops, op)
	}
	return clients, ops
}

// encodeSeq is decodeSeq's inverse, for writing seeds as scenarios: the
// clients' formats, their TTLs as indexes into seqTTLs, and which of them
// use WithoutScripts.
func encodeSeq(formats [seqClients]Format, ttls [seqClients]int, noScripts [seqClients]bool, ops ...seqOp) []byte {
	var header [3]byte
	for i := range seqClients {
		header[0] |= byte(formats[i]) << (2 * i)
		header[1] |= byte(ttls[i]) << (2 * i)
		if noScripts[i] {
			header[2] |= 1 << i
		}
	}
	data := header[:]
	for _, op := range ops {
		fault := byte(0)
		if op.lose > 0 {
			fault = byte(op.lose-1)*8 + 7
		}
		data = append(data, byte(op.key)*seqClients*byte(seqKinds)+byte(op.kind)*seqClients+byte(op.client), op.arg, fault)
	}
	return data
}

// Shorthands for seeds.
func acquire(client, key int) seqOp { return seqOp{kind: opAcquire, client: client, key: key} }
func release(client, key int) seqOp { return seqOp{kind: opRelease, client: client, key: key} }
func refresh(client, key, ttl int) seqOp {
	return seqOp{kind: opRefresh, client: client, key: key, arg: byte(ttl << 4)}
}
func advance(step int) seqOp       { return seqOp{kind: opAdvance, arg: byte(step)} }
func losing(n int, op seqOp) seqOp { op.lose = n; return op }

// seqSeeds are scenarios the fuzzer starts from; testdata/fuzz holds more.
func seqSeeds() [][]byte {
	tokens := [seqClients]Format{TokenFormat, TokenFormat, TokenFormat}
	mixed := [seqClients]Format{TokenFormat, UnixSeconds, FloatSeconds}
	scripts, classic := [seqClients]bool{}, [seqClients]bool{true, true, true}
	return [][]byte{
		// Contention, release, and a new holder.
		encodeSeq(tokens, [seqClients]int{1, 1, 1}, scripts,
			acquire(0, 0), acquire(1, 0), acquire(2, 1), release(0, 0), acquire(1, 0), release(1, 0), release(2, 1)),
		// A crashed holder: its lease runs out and another client takes it
		// over; the late Release is refused and leaves the new lock alone.
		encodeSeq(mixed, [seqClients]int{1, 1, 1}, classic,
			acquire(1, 0), advance(4), acquire(0, 0), advance(6), acquire(2, 0), release(1, 0), release(0, 0), release(2, 0)),
		// Refresh keeps a lease past its first end; a lapsed one is lost.
		encodeSeq(mixed, [seqClients]int{0, 1, 2}, scripts,
			acquire(0, 0), advance(1), refresh(0, 0, 1), advance(2), acquire(1, 0), advance(5), refresh(0, 0, 1), acquire(1, 0)),
		// H5: an acquisition whose reply was lost is recognised by its own
		// Locker, and by no other.
		encodeSeq(tokens, [seqClients]int{1, 1, 1}, classic,
			losing(1, acquire(0, 0)), acquire(1, 0), acquire(0, 0), release(0, 0), acquire(1, 0)),
		// A Release whose reply was lost after the key was deleted, retried
		// once someone else holds the key: it reports success and leaves
		// the new holder's key alone.
		encodeSeq(mixed, [seqClients]int{2, 2, 2}, classic,
			acquire(2, 1), losing(3, release(2, 1)), acquire(0, 1), release(2, 1), acquire(1, 1)),
	}
}

// seqClient is one client: its own connection, whose replies can be lost.
type seqClient struct {
	client *redis.Client
	loser  *replyLoser
}

// replyLoser loses one reply of its client when asked to: the command or
// pipeline reaches the server and is applied, and the client then sees a
// timeout instead of the reply (H5), like loseReply but armed per operation.
type replyLoser struct {
	countdown atomic.Int32 // > 0: the countdown-th round trip from now loses its reply
	fired     atomic.Bool
}

func loseRepliesOnRequest(c *redis.Client) *replyLoser {
	l := &replyLoser{}
	c.AddHook(l)
	return l
}

// arm makes the n-th round trip from now lose its reply.
func (l *replyLoser) arm(n int) { l.fired.Store(false); l.countdown.Store(int32(n)) }

// disarm stops losing replies and reports whether one was lost since arm.
// The client outlives the input, so it also forgets that one was.
func (l *replyLoser) disarm() bool { l.countdown.Store(0); return l.fired.Swap(false) }

func (l *replyLoser) afterRoundTrip(err error, cmds ...redis.Cmder) error {
	if connectionSetup(cmds) || l.countdown.Load() <= 0 || l.countdown.Add(-1) > 0 {
		return err
	}
	l.fired.Store(true)
	for _, cmd := range cmds {
		cmd.SetErr(errLostReply{}) // no command of the round trip sees its reply, as when go-redis's read times out
	}
	return errLostReply{}
}

// connectionSetup reports commands go-redis sends on a new connection,
// which are not round trips of the algorithm and must not be counted.
func connectionSetup(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		switch cmd.Name() {
		case "hello", "client", "auth", "select":
		default:
			return false
		}
	}
	return true
}

func (l *replyLoser) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *replyLoser) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return l.afterRoundTrip(next(ctx, cmd), cmd)
	}
}

func (l *replyLoser) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return l.afterRoundTrip(next(ctx, cmds), cmds...)
	}
}

// seqLock is the model of one Lock a client was handed.
type seqLock struct {
	lock     *Lock
	client   int
	key      int
	ends     time.Time // when its holder believes the lease ends
	released bool      // a Release answered nil or ErrNotHeld: every later call is refused
	lost     bool      // a Refresh answered ErrNotHeld: every later Refresh is refused
	inDoubt  bool      // a Release failed in transit, and may have deleted the key
}

// seqKey is the model of one key on the server.
type seqKey struct {
	value  string    // what the server holds; "" for nothing
	ends   time.Time // the expiry the value states
	holder *seqLock  // the Lock the value belongs to; nil for an orphan, a write whose reply was lost
	writer int       // the client that wrote the value
}

// takeable reports whether anyone may take the key at now: it is empty or
// the lease it states has ended (the SETNX page's rule: expiry <= now),
// where a whole number of seconds is held through the end of its second
// (heldUntil).
func (r *seqRun) takeable(k *seqKey, now time.Time) bool {
	if k.value == "" {
		return true
	}
	ends := k.ends
	if r.cfg[k.writer].format == UnixSeconds {
		ends = ends.Add(time.Second)
	}
	return !ends.After(now)
}

// leaseEnd is the expiry a Locker writing format states for a lease of ttl
// beginning at now, as Format's documentation gives it: TokenFormat and
// FloatSeconds cut to the millisecond, the classic integer writers add
// their +1 after cutting to their unit.
func leaseEnd(format Format, now time.Time, ttl time.Duration) time.Time {
	end := now.Add(ttl)
	switch format {
	case UnixMillis:
		return end.Truncate(time.Millisecond).Add(time.Millisecond)
	case UnixSeconds:
		return end.Truncate(time.Second).Add(time.Second)
	}
	return end.Truncate(time.Millisecond)
}

// seqRun is one input being executed: the system under test and the model.
type seqRun struct {
	t       *testing.T
	server  *miniredis.Miniredis
	clients [seqClients]*seqClient
	start   time.Time // where clock started
	clock   *ManualClock
	lockers [seqClients]*Locker
	cfg     [seqClients]seqConfig
	ops     []seqOp

	keys  [len(seqKeys)]seqKey
	locks []*seqLock
	trace []string // what happened so far, for the failure message
}

func newSeqRun(t *testing.T, server *miniredis.Miniredis, clients [seqClients]*seqClient, data []byte) *seqRun {
	start := clockStart()
	r := &seqRun{t: t, server: server, clients: clients, start: start, clock: NewManualClock(start)}
	r.cfg, r.ops = decodeSeq(data)
	for i, cfg := range r.cfg {
		opts := []Option{WithClock(r.clock), WithTTL(cfg.ttl), WithFormat(cfg.format)}
		commands := "scripts where they run"
		if cfg.noScripts {
			opts, commands = append(opts, WithoutScripts()), "only the classic commands"
		}
		l, err := New(clients[i].client, opts...)
		if err != nil {
			t.Fatal(err)
		}
		r.lockers[i] = l
		r.trace = append(r.trace, fmt.Sprintf("client %d writes %v with a TTL of %v, %s", i, cfg.format, cfg.ttl, commands))
	}
	return r
}

// fail stops the input with the story so far.
func (r *seqRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\n\nsteps:\n  %s", fmt.Sprintf(format, args...), strings.Join(r.trace, "\n  "))
}

func (r *seqRun) logf(format string, args ...any) {
	r.trace = append(r.trace, fmt.Sprintf("+%v ", r.clock.Now().Sub(r.start))+fmt.Sprintf(format, args...))
}

// stored returns what the server holds at key i, "" for nothing.
func (r *seqRun) stored(i int) string {
	v, err := r.server.Get(seqKeys[i])
	if errors.Is(err, miniredis.ErrKeyNotFound) {
		return ""
	}
	if err != nil {
		r.fail("reading %s: %v", seqKeys[i], err)
	}
	return v
}

// locksOf returns the client's Locks on the key, the newest first.
func (r *seqRun) locksOf(client, key int) []*seqLock {
	var mine []*seqLock
	for i := len(r.locks) - 1; i >= 0; i-- {
		if l := r.locks[i]; l.client == client && l.key == key {
			mine = append(mine, l)
		}
	}
	return mine
}

func (r *seqRun) step(op seqOp) {
	r.t.Helper()
	switch op.kind {
	case opAdvance:
		d := seqSteps[int(op.arg)%len(seqSteps)]
		r.clock.Advance(d)
		r.server.FastForward(d) // Redis's own expiries (H6) follow the same time
		r.logf("the clock moves %v", d)
	case opAcquire:
		r.acquire(op)
	case opRelease, opRefresh:
		mine := r.locksOf(op.client, op.key)
		if len(mine) == 0 {
			return // nothing to release or refresh: skip
		}
		lock := mine[int(op.arg&0x0f)%len(mine)]
		if op.kind == opRelease {
			r.release(op, lock)
		} else {
			r.refresh(op, lock, seqTTLs[op.arg>>4&3])
		}
	}
	r.checkServer()
	r.checkMutualExclusion()
}

// withFault performs one call with the operation's fault armed, and
// reports whether a reply was lost.
func (r *seqRun) withFault(op seqOp, call func()) (lost bool) {
	loser := r.clients[op.client].loser
	if op.lose > 0 {
		loser.arm(op.lose)
	}
	call()
	return loser.disarm()
}

func describe(err error, lost bool) string {
	msg := "ok"
	if err != nil {
		msg = err.Error()
	}
	if lost {
		msg += " (a reply was lost)"
	}
	return msg
}

func (r *seqRun) acquire(op seqOp) {
	r.t.Helper()
	now, key := r.clock.Now(), &r.keys[op.key]
	before := r.stored(op.key)
	// The model: the key is free or its lease over, or it holds our own
	// write whose reply was lost, still live, which only a token lets us
	// recognise (H5).
	free := r.takeable(key, now)
	reclaim := !free && key.holder == nil && key.writer == op.client && r.cfg[op.client].format == TokenFormat
	wantEnds := leaseEnd(r.cfg[op.client].format, now, r.cfg[op.client].ttl)
	if reclaim {
		wantEnds = key.ends
	}

	var lock *Lock
	var err error
	lost := r.withFault(op, func() { lock, err = r.lockers[op.client].TryAcquire(context.Background(), seqKeys[op.key]) })
	after := r.stored(op.key)
	r.logf("client %d TryAcquire %s: %s", op.client, seqKeys[op.key], describe(err, lost))

	switch {
	case err == nil:
		if !free && !reclaim {
			r.fail("client %d acquired %s, which holds %q, live until +%v", op.client, seqKeys[op.key], key.value, key.ends.Sub(r.start))
		}
		if !lock.ExpiresAt().Equal(wantEnds) {
			r.fail("the lease ends at +%v, want +%v", lock.ExpiresAt().Sub(r.start), wantEnds.Sub(r.start))
		}
		r.wrote(op.key, after, wantEnds)
		if !reclaim && after == before {
			r.fail("a win must write a value of its own, but %s still holds %q", seqKeys[op.key], after)
		}
		held := &seqLock{lock: lock, client: op.client, key: op.key, ends: wantEnds}
		r.locks = append(r.locks, held)
		*key = seqKey{value: after, ends: wantEnds, holder: held, writer: op.client}
	case errors.Is(err, ErrNotAcquired):
		if free || reclaim {
			r.fail("client %d was refused %s: %v; the model says it is free (%v) or its own lost write (%v)",
				op.client, seqKeys[op.key], err, free, reclaim)
		}
		r.unchanged(op.key, before, after)
	case lost:
		// The write may have landed before the reply was lost: then the
		// key holds an orphan, our value without a Lock.
		if after == before {
			return
		}
		if !free {
			r.fail("a TryAcquire that lost its reply changed %s from %q to %q, a live lease", seqKeys[op.key], before, after)
		}
		r.wrote(op.key, after, wantEnds)
		*key = seqKey{value: after, ends: wantEnds, writer: op.client}
	default:
		r.fail("client %d TryAcquire %s: unexpected error %v", op.client, seqKeys[op.key], err)
	}
}

func (r *seqRun) release(op seqOp, h *seqLock) {
	r.t.Helper()
	now, key := r.clock.Now(), &r.keys[op.key]
	before := r.stored(op.key)
	live, ours := h.ends.After(now), key.holder == h
	// The model: a Release is refused once a Release has answered; it
	// succeeds while the lease is live and the value ours, or, after a
	// Release that failed in transit, while the lease is live at all (that
	// one may have deleted the key). It deletes the key only if it holds
	// our value, live or not. Without an owner token, a Release after one
	// that failed in transit is refused and leaves the key alone: the
	// value might be a successor's identical one.
	bareInDoubt := h.inDoubt && r.cfg[op.client].format != TokenFormat
	wantErr := !live || h.released || !ours && !h.inDoubt || bareInDoubt

	var err error
	lost := r.withFault(op, func() { err = h.lock.Release(context.Background()) })
	after := r.stored(op.key)
	r.logf("client %d Release %s (lock #%d): %s", op.client, seqKeys[op.key], r.index(h), describe(err, lost))

	switch {
	case err == nil || errors.Is(err, ErrNotHeld):
		if gotErr := err != nil; gotErr != wantErr {
			r.fail("Release answered %v; the model wants an error: %v (live %v, ours %v, released %v, in doubt %v)",
				err, wantErr, live, ours, h.released, h.inDoubt)
		}
		if !h.released && ours && !bareInDoubt {
			r.deleted(op.key, after)
		} else {
			r.unchanged(op.key, before, after)
		}
		h.released = true
	case lost:
		h.inDoubt = true
		switch {
		case after == before:
		case after == "" && ours && !h.released:
			r.deleted(op.key, after)
		default:
			r.fail("a Release that lost its reply changed %s from %q to %q", seqKeys[op.key], before, after)
		}
	default:
		r.fail("client %d Release %s: unexpected error %v", op.client, seqKeys[op.key], err)
	}
}

func (r *seqRun) refresh(op seqOp, h *seqLock, ttl time.Duration) {
	r.t.Helper()
	now, key := r.clock.Now(), &r.keys[op.key]
	before := r.stored(op.key)
	live, ours := h.ends.After(now), key.holder == h
	// The model: a Refresh succeeds while the lease is live and the value
	// ours, and never after a Release answered or a Refresh was refused;
	// without an owner token, never after a Release failed in transit
	// either, which also ends the lock.
	bareInDoubt := h.inDoubt && r.cfg[op.client].format != TokenFormat
	wantErr := !live || !ours || h.released || h.lost || bareInDoubt
	wantEnds := leaseEnd(r.cfg[op.client].format, now, ttl)

	var err error
	lost := r.withFault(op, func() { err = h.lock.Refresh(context.Background(), ttl) })
	after := r.stored(op.key)
	r.logf("client %d Refresh %s (lock #%d) for %v: %s", op.client, seqKeys[op.key], r.index(h), ttl, describe(err, lost))

	switch {
	case err == nil || errors.Is(err, ErrNotHeld):
		if gotErr := err != nil; gotErr != wantErr {
			r.fail("Refresh answered %v; the model wants an error: %v (live %v, ours %v, released %v, lost %v)",
				err, wantErr, live, ours, h.released, h.lost)
		}
		if err != nil {
			h.lost = true
			h.released = h.released || bareInDoubt
			r.unchanged(op.key, before, after)
			return
		}
		r.wrote(op.key, after, wantEnds)
		h.ends, key.value, key.ends = wantEnds, after, wantEnds
	case lost:
		// The new value may or may not be stored: the Lock believes the
		// earlier end, the server holds either.
		if wantEnds.Before(h.ends) {
			h.ends = wantEnds
		}
		if after != before {
			if !ours || wantErr {
				r.fail("a Refresh that lost its reply changed %s from %q to %q", seqKeys[op.key], before, after)
			}
			r.wrote(op.key, after, wantEnds)
			key.value, key.ends = after, wantEnds
		}
	default:
		r.fail("client %d Refresh %s: unexpected error %v", op.client, seqKeys[op.key], err)
	}
	if !h.released && !h.lost && !h.lock.ExpiresAt().Equal(h.ends) {
		r.fail("the Lock says its lease ends at +%v, the model +%v", h.lock.ExpiresAt().Sub(r.start), h.ends.Sub(r.start))
	}
}

func (r *seqRun) index(h *seqLock) int {
	for i, l := range r.locks {
		if l == h {
			return i
		}
	}
	return -1
}

// wrote checks a value just written: it states the expected end.
func (r *seqRun) wrote(key int, value string, ends time.Time) {
	r.t.Helper()
	got, err := parseExpiry(value)
	if err != nil || !got.Equal(ends) {
		r.fail("%s holds %q, which reads %v, %v; want an expiry of +%v", seqKeys[key], value, got, err, ends.Sub(r.start))
	}
}

func (r *seqRun) unchanged(key int, before, after string) {
	r.t.Helper()
	if after != before {
		r.fail("%s changed from %q to %q, but the call was refused or was not the owner's", seqKeys[key], before, after)
	}
}

func (r *seqRun) deleted(key int, after string) {
	r.t.Helper()
	if after != "" {
		r.fail("%s still holds %q after its owner's Release", seqKeys[key], after)
	}
	r.keys[key] = seqKey{}
}

// checkServer compares every key with the model. Redis may delete a key
// on its own only after the lease the value states has ended (H6's safety
// net, which FastForward applies): never while it is live.
func (r *seqRun) checkServer() {
	r.t.Helper()
	now := r.clock.Now()
	for i := range r.keys {
		key, got := &r.keys[i], r.stored(i)
		switch {
		case got == key.value:
		case got == "" && !key.ends.After(now):
			*key = seqKey{} // the safety net removed an ended lease
		default:
			r.fail("%s holds %q; the model says %q, until +%v", seqKeys[i], got, key.value, key.ends.Sub(r.start))
		}
	}
}

// checkMutualExclusion checks the point of it all, apart from the model's
// bookkeeping: among the Locks that still believe they hold a live lease
// (not released, not lost, ExpiresAt after now), no two share a key.
func (r *seqRun) checkMutualExclusion() {
	r.t.Helper()
	now := r.clock.Now()
	var holder [len(seqKeys)]*seqLock
	for _, h := range r.locks {
		if h.released || h.lost || h.inDoubt || !h.lock.ExpiresAt().After(now) {
			continue
		}
		if other := holder[h.key]; other != nil {
			r.fail("two live holders of %s: lock #%d of client %d and lock #%d of client %d",
				seqKeys[h.key], r.index(other), other.client, r.index(h), h.client)
		}
		holder[h.key] = h
	}
}
