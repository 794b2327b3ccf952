package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/redistest"
)

// The ACL rules each feature needs. This table is the one place that says
// so: the tests below check that every feature works for a user with
// exactly the core's rules plus its own, and that taking any single one of
// its rules away makes the feature fail or has the server refuse a
// command (the server's ACL LOG tells). The README's ACL lines are these
// rules.
//
// A rule is anything ACL SETUSER accepts: "+command", "+command|sub",
// "~keypattern", "&channelpattern" (a user created with "reset" may use
// no channel). An optional feature is one the library tries and gives up
// on when refused: its refusals are expected from users without its rules.
//
// The core's +unwatch: a watched transaction that finds the key not ours
// ends without EXEC, and the library then ends the watch itself, lest it
// abort a later transaction on the pooled connection.
var aclCore = aclFeature{
	name:  "core: TryAcquire, Acquire, takeover of an expired lease, Release",
	rules: "~lock.* +setnx +get +getset +del +pexpire +watch +unwatch +multi +exec",
	use:   useCore,
}

var aclFeatures = []aclFeature{
	aclCore,
	{name: "Refresh and WithAutoRefresh", rules: "+set", use: useRefresh},
	{name: "WithFencing", rules: "~{lock.*}.fence +incr", use: useFencing},
	{name: "NewServerClock", rules: "+time", use: useServerClock},
	// An election of a name "lock.*": its lock, term counter and record.
	// Renewals are refreshes (+set); the term is a fencing token (+incr).
	{name: "leader election: Campaign, Leader, Resign", rules: "~{lock.*}.election ~{lock.*}.election.fence ~{lock.*}.leader +incr +set", use: useElection},

	// The scripts write with SET NX PX (acquire.lua, queued.lua).
	{name: "optional: scripted fast path", rules: "+evalsha +eval +set", use: useCore, scripted: true,
		optional: refusedCommands("evalsha", "eval")},
	// The key's marker (releasedKey): ForceRelease leaves the trace of the
	// token it broke there, so that the broken holder's Release reports
	// ErrNotHeld (forcetrace.go); the release script of a bare value
	// remembers itself there, so that a copy go-redis resent after a lost
	// reply knows its own work (H5).
	{name: "optional: a forced release leaves its trace", rules: "+zadd +zscore +zremrangebyscore +pttl +zcard ~{lock.*}.released ~{lock.*}.waiters", use: useReleaseMarker,
		optional: func(e *redis.ACLLogEntry) bool {
			return refusedCommands("zremrangebyscore")(e) || e.Reason == "key" && strings.HasSuffix(e.Object, ".released")
		}},
	// SET NX PX, and SET NX PX GET on Redis 7.0: sent alone, not from a
	// script (whose SET the scripts' rules grant).
	{name: "optional: SET NX PX fast path", rules: "+set", use: useCore,
		optional: func(e *redis.ACLLogEntry) bool { return refusedCommands("set")(e) && e.Context != "lua" }},
	// A subscription idle for 3s also gets a PING from go-redis's health
	// check (PubSub.Channel's default), refused without +ping: too slow to
	// exercise here, so either grant +ping or have the library subscribe
	// with redis.WithChannelHealthCheckInterval(0).
	// A wait on wake-ups lists itself in the key's queue (wakelisten.go),
	// so that a release that hands over publishes for it.
	{name: "optional: pub/sub wake-ups", rules: "+publish +subscribe &setnxlock:released:lock.* +zadd +pttl +zrem ~{lock.*}.waiters", use: useWakeups,
		optional: func(e *redis.ACLLogEntry) bool {
			return refusedCommands("publish", "subscribe")(e) || e.Reason == "channel" && strings.HasPrefix(e.Object, WakeChannel(""))
		}},

	{name: "optional: handoff to queued waiters", rules: "+evalsha +eval +publish +subscribe +zadd +zrem +zrange +zscore +pttl +set &setnxlock:handoff:* ~{lock.*}.waiters", use: useHandoff, scripted: true,
		optional: refusedHandoff},
	// Without scripts, a release reads the head of the queue with the key
	// (ZRANGE): a user without the queue's rules is refused that once.
	{name: "optional: handoff to queued waiters, without scripts", rules: "+publish +subscribe +zadd +zrem +zrange +zscore +pttl +set &setnxlock:handoff:* ~{lock.*}.waiters", use: useHandoffCommands,
		optional: refusedHandoff},

	// go-redis options that send commands of their own on every new
	// connection, and fail the connection when they are refused.
	{name: "go-redis Options.ClientName", rules: "+client|setname", use: useCore,
		options: func(o *redis.Options) { o.ClientName = "billing" }},
	{name: "go-redis Options.DB other than 0", rules: "+select", use: useCore,
		options: func(o *redis.Options) { o.DB = 1 }},
}

// aclFeature is one row of the table.
type aclFeature struct {
	name    string
	rules   string                 // ACL rules on top of the core's
	use     func(u *aclUser) error // exercises the feature; nil when it works
	options func(*redis.Options)   // client options the feature needs, if any
	// optional, for a feature the library falls back from, recognises the
	// refusals it causes in users without its rules.
	optional func(*redis.ACLLogEntry) bool
	scripted bool // the feature exists only where scripts run
}

func refusedCommands(names ...string) func(*redis.ACLLogEntry) bool {
	return func(e *redis.ACLLogEntry) bool { return e.Reason == "command" && slices.Contains(names, e.Object) }
}

// refusedHandoff recognises the refusals of the queue and the handoff.
func refusedHandoff(e *redis.ACLLogEntry) bool {
	return e.Reason == "channel" && strings.HasPrefix(e.Object, handoffChannelPrefix) ||
		e.Reason == "key" && strings.HasSuffix(e.Object, ".waiters") || refusedCommands("zrange")(e)
}

// userRules returns the rules of a user with exactly f's rules and the core's.
func (f aclFeature) userRules() []string {
	rules := strings.Fields(f.rules)
	if f.name != aclCore.name {
		rules = append(strings.Fields(aclCore.rules), rules...)
	}
	return rules
}

// othersOptional returns the optional features other than f: a user of f
// lacks their rules, and the library falls back from them.
func (f aclFeature) othersOptional() []aclFeature {
	var others []aclFeature
	for _, o := range aclFeatures {
		if o.optional != nil && o.name != f.name {
			others = append(others, o)
		}
	}
	return others
}

func TestEachFeatureWorksForAUserWithExactlyItsACLRules(t *testing.T) {
	server := newACLServer(t)
	for _, f := range aclFeatures {
		t.Run(f.name, func(t *testing.T) {
			u := server.user(t, f.options, f.userRules()...)
			require.NoError(t, u.exercise(f.use), "with the rules %q", strings.Join(f.userRules(), " "))
			assert.Empty(t, u.refusals(f.othersOptional()...), "refused with the rules %q", strings.Join(f.userRules(), " "))
		})
	}
}

func TestEachFeatureNeedsEveryOneOfItsACLRules(t *testing.T) {
	server := newACLServer(t)
	for _, f := range aclFeatures {
		for _, missing := range strings.Fields(f.rules) {
			t.Run(f.name+" without "+missing, func(t *testing.T) {
				rules := without(f.userRules(), missing)
				u := server.user(t, f.options, rules...)
				err := u.exercise(f.use)
				refused := u.refusals(f.othersOptional()...)
				if err == nil && len(refused) == 0 {
					t.Fatalf("%s works with %q: %s is not needed", f.name, strings.Join(rules, " "), missing)
				}
				t.Logf("%v; refused: %v", err, refused)
			})
		}
	}
}

// The ACL Redis recommends for users who must not run scripts: every
// feature that does not need scripts works, and only scripts are refused.
func TestEveryFeatureWorksForAUserWithAllCommandsButScripting(t *testing.T) {
	server := newACLServer(t)
	rules := []string{"~*", "&*", "+@all", "-@scripting"}
	scripts := aclFeatureNamed(t, "optional: scripted fast path")
	u := server.user(t, nil, rules...)
	require.ErrorContains(t, u.client().Eval(ctx, "return 1", nil).Err(), "NOPERM", "the user must not be able to run scripts")
	for _, f := range aclFeatures {
		if f.scripted {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			u := server.user(t, f.options, rules...)
			require.NoError(t, u.exercise(f.use))
			assert.Empty(t, u.refusals(scripts))
		})
	}
}

// What go-redis v9 sends on every new connection, and that a user with
// nothing but the core's rules needs no grant for any of it: HELLO (with
// AUTH inside) is allowed to every user, and go-redis ignores error
// replies to the CLIENT commands that follow (unknown subcommands before
// Redis 7.2, NOPERM after). Options.ClientName and Options.DB add CLIENT
// SETNAME and SELECT, which are not ignored: see the table.
func TestGoRedisConnectionSetupNeedsNoGrant(t *testing.T) {
	server := newACLServer(t)
	u := server.user(t, nil, aclCore.userRules()...)
	client := u.client()
	setup := &setupHook{}
	client.AddHook(setup)
	require.NoError(t, u.lockerOn(client).acquireAndRelease("lock.setup"))

	// Every new connection (the pool may open more than one) sends HELLO
	// with AUTH, then CLIENT commands whose refusal go-redis ignores.
	require.NotEmpty(t, setup.commands)
	require.Len(t, setup.replies, len(setup.commands))
	assert.Equal(t, "hello 3 auth "+u.name+" <password>", setup.commands[0])
	for i, command := range setup.commands {
		if strings.HasPrefix(command, "hello ") {
			assert.Equal(t, "ok", setup.replies[i], "HELLO with AUTH")
			continue
		}
		require.True(t, strings.HasPrefix(command, "client maint_notifications ") || strings.HasPrefix(command, "client setinfo "), command)
		reply := setup.replies[i]
		tolerated := reply == "ok" || strings.HasPrefix(reply, "NOPERM") || strings.HasPrefix(reply, "ERR unknown subcommand")
		assert.True(t, tolerated, "%s: %s", command, reply)
	}
	t.Logf("connection setup: %q, replies %q", setup.commands, setup.replies)
}

// A user (or a proxy) that allows WATCH and DEL but refuses MULTI: were
// MULTI, DEL and EXEC sent in one write, the server would refuse MULTI and
// run DEL on its own, outside any transaction, and the release would be
// the page's plain GET-then-DEL (H3). The Locker checks MULTI once before
// its first watched write and refuses to write without it.
func TestARefusedMultiStopsWatchedWritesBeforeTheyAreSent(t *testing.T) {
	server := newACLServer(t)
	u := server.user(t, nil, without(aclCore.userRules(), "+multi")...)
	client := u.client()
	lock, err := u.lockerOn(client).TryAcquire(ctx, "lock.k")
	require.NoError(t, err)
	held, err := server.admin.Get(ctx, "lock.k").Result()
	require.NoError(t, err)
	sent := record(client)

	require.ErrorIs(t, lock.Release(ctx), ErrNoTransactions)
	assert.Empty(t, sent.names(), "no WATCH, GET or DEL after the refused MULTI")
	assert.Equal(t, held, server.admin.Get(ctx, "lock.k").Val(), "the key is untouched")
}

// aclServer is a redis-server with an admin connection that creates users.
type aclServer struct {
	addr  string
	admin *redis.Client
	users atomic.Int64
}

// calls returns how often the server has run command, scripts included,
// from INFO commandstats.
func (s *aclServer) calls(command string) int {
	info := s.admin.Info(ctx, "commandstats").Val()
	_, rest, found := strings.Cut(info, "cmdstat_"+command+":calls=")
	if !found {
		return 0
	}
	n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	return n
}

func newACLServer(t *testing.T) *aclServer {
	s := &aclServer{addr: redistest.Start(t, "--acllog-max-len", "1000").Addr()}
	s.admin = redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	t.Cleanup(func() { _ = s.admin.Close() })
	return s
}

const aclPassword = "secret"

// user creates a user with exactly the given rules and returns a session
// for it, with a ManualClock of its own.
func (s *aclServer) user(t *testing.T, options func(*redis.Options), rules ...string) *aclUser {
	t.Helper()
	u := &aclUser{t: t, server: s, name: fmt.Sprintf("u%d", s.users.Add(1)), options: options, clock: NewManualClock(clockStart())}
	args := []any{"ACL", "SETUSER", u.name, "reset", "on", ">" + aclPassword}
	for _, r := range rules {
		args = append(args, r)
	}
	require.NoError(t, s.admin.Do(ctx, args...).Err())
	require.NoError(t, s.admin.FlushAll(ctx).Err())
	require.NoError(t, s.admin.ScriptFlush(ctx).Err()) // so a user's first script needs EVAL
	return u
}

// aclUser is one ACL user's session: its clients and its clock.
type aclUser struct {
	t       *testing.T
	server  *aclServer
	name    string
	options func(*redis.Options)
	clock   *ManualClock
}

// client returns a new client logged in as the user, with its own pool.
func (u *aclUser) client() *redis.Client {
	opts := &redis.Options{Addr: u.server.addr, Username: u.name, Password: aclPassword, MaxRetries: -1}
	if u.options != nil {
		u.options(opts)
	}
	c := redis.NewClient(opts)
	u.t.Cleanup(func() { _ = c.Close() })
	return c
}

// locker returns a Locker on a new client of the user, with the session's
// ManualClock and a TTL of 9s; opts override these.
func (u *aclUser) locker(opts ...Option) *aclLocker { return u.lockerOn(u.client(), opts...) }

func (u *aclUser) lockerOn(client redis.UniversalClient, opts ...Option) *aclLocker {
	u.t.Helper()
	base := []Option{WithClock(u.clock), WithTTL(9 * time.Second), WithBackoff(time.Millisecond, 5*time.Millisecond)}
	l, err := New(client, append(base, opts...)...)
	require.NoError(u.t, err)
	u.t.Cleanup(func() { _ = l.Close() })
	return &aclLocker{l}
}

// exercise runs a feature, then moves the clock far ahead so that no
// lock's background goroutine outlives a failed exercise.
func (u *aclUser) exercise(use func(*aclUser) error) error {
	defer u.clock.Advance(24 * time.Hour)
	return use(u)
}

// refusals returns what the server refused the user, from its ACL LOG,
// as "reason object" ("command unwatch", "key {lock.k}.fence", "channel
// ..."), leaving out what go-redis tolerates at connection setup and what
// the given optional features fall back from.
func (u *aclUser) refusals(fallingBack ...aclFeature) []string {
	u.t.Helper()
	entries, err := u.server.admin.ACLLog(ctx, 1000).Result()
	require.NoError(u.t, err)
	var refused []string
	for _, e := range entries {
		if e.Username != u.name || e.Object == "client|setinfo" || e.Object == "client|maint_notifications" {
			continue
		}
		if !slices.ContainsFunc(fallingBack, func(f aclFeature) bool { return f.optional(e) }) {
			refused = append(refused, e.Reason+" "+e.Object)
		}
	}
	return refused
}

// setupHook records the connection setup commands (HELLO and CLIENT ...)
// and their replies, the password and go-redis's name and version masked.
type setupHook struct {
	commands, replies []string
}

func (h *setupHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *setupHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd) // a command's own error may be set on it only after the hooks
		h.note(cmd, err)
		return err
	}
}

func (h *setupHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.note(cmd, cmd.Err())
		}
		return err
	}
}

func (h *setupHook) note(cmd redis.Cmder, err error) {
	if cmd.Name() != "hello" && cmd.Name() != "client" {
		return
	}
	var words []string
	for i, a := range cmd.Args() {
		word := fmt.Sprint(a)
		switch {
		case word == aclPassword:
			word = "<password>"
		case i == 3 && cmd.Name() == "client" && strings.EqualFold(fmt.Sprint(cmd.Args()[1]), "setinfo"):
			word = "<go-redis>"
		}
		words = append(words, word)
	}
	reply := "ok"
	if err != nil {
		reply = err.Error()
	}
	h.commands, h.replies = append(h.commands, strings.Join(words, " ")), append(h.replies, reply)
}

func aclFeatureNamed(t *testing.T, name string) aclFeature {
	i := slices.IndexFunc(aclFeatures, func(f aclFeature) bool { return f.name == name })
	require.GreaterOrEqual(t, i, 0, "no feature %q in the table", name)
	return aclFeatures[i]
}

func without(rules []string, rule string) []string {
	var kept []string
	for _, r := range rules {
		if r != rule {
			kept = append(kept, r)
		}
	}
	return kept
}

// aclLocker wraps a Locker with exercises that report the first thing
// that went wrong as an error instead of failing the test, so the same
// exercise shows a feature working and a feature missing a rule.
type aclLocker struct{ *Locker }

func (l *aclLocker) acquireAndRelease(key string) error {
	lock, err := l.TryAcquire(ctx, key)
	if err != nil {
		return err
	}
	return lock.Release(ctx)
}

// useCore: acquire, be refused, take an expired lease over, have the late
// release of the crashed holder refused, release.
func useCore(u *aclUser) error {
	crashed, err := u.locker().TryAcquire(ctx, "lock.core")
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	other := u.locker()
	if _, err := other.TryAcquire(ctx, "lock.core"); !errors.Is(err, ErrNotAcquired) {
		return fmt.Errorf("acquire of a held lock: want ErrNotAcquired, got %v", err)
	}
	u.clock.Set(crashed.ExpiresAt())
	taker, err := other.TryAcquire(ctx, "lock.core")
	if err != nil {
		return fmt.Errorf("takeover: %w", err)
	}
	if err := crashed.Release(ctx); !errors.Is(err, ErrNotHeld) {
		return fmt.Errorf("late release: want ErrNotHeld, got %v", err)
	}
	if err := taker.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	lock, err := other.Acquire(waitCtx, "lock.core")
	if err != nil {
		return fmt.Errorf("Acquire: %w", err)
	}
	return lock.Release(ctx)
}

// useRefresh: Refresh a lease, then let auto-refresh renew one.
func useRefresh(u *aclUser) error {
	lock, err := u.locker().TryAcquire(ctx, "lock.refresh")
	if err != nil {
		return err
	}
	defer func() { _ = lock.Release(ctx) }()
	u.clock.Advance(8 * time.Second)
	if err := lock.Refresh(ctx, 9*time.Second); err != nil {
		return fmt.Errorf("Refresh: %w", err)
	}

	renewed, err := u.locker(WithAutoRefresh()).TryAcquire(ctx, "lock.renewed")
	if err != nil {
		return err
	}
	defer func() { _ = renewed.Release(ctx) }()
	u.clock.Advance(3 * time.Second) // TTL/3
	want := u.clock.Now().Add(9 * time.Second)
	for deadline := time.Now().Add(5 * time.Second); !renewed.ExpiresAt().Equal(want); {
		if time.Now().After(deadline) {
			return fmt.Errorf("auto-refresh did not renew the lease to %v (it ends at %v)", want, renewed.ExpiresAt())
		}
		time.Sleep(time.Millisecond) // real time for the renewal goroutine, not lease time
	}
	return renewed.Release(ctx)
}

// useFencing: tokens from a fresh acquire, a second one, and a takeover.
func useFencing(u *aclUser) error {
	fenced := func() *aclLocker { return u.locker(WithFencing()) }
	first, err := fenced().TryAcquire(ctx, "lock.fenced")
	if err != nil {
		return err
	}
	if err := first.Release(ctx); err != nil {
		return err
	}
	crashed, err := fenced().TryAcquire(ctx, "lock.fenced")
	if err != nil {
		return err
	}
	u.clock.Set(crashed.ExpiresAt())
	taker, err := fenced().TryAcquire(ctx, "lock.fenced")
	if err != nil {
		return fmt.Errorf("fenced takeover: %w", err)
	}
	if !(0 < first.FencingToken() && first.FencingToken() < crashed.FencingToken() && crashed.FencingToken() < taker.FencingToken()) {
		return fmt.Errorf("tokens do not strictly increase: %d, %d, %d", first.FencingToken(), crashed.FencingToken(), taker.FencingToken())
	}
	return taker.Release(ctx)
}

// useElection: lead, be read by another candidate, resign; then nobody
// leads.
func useElection(u *aclUser) error {
	lead, err := u.locker().Campaign(ctx, "lock.jobs", "a")
	if err != nil {
		return fmt.Errorf("Campaign: %w", err)
	}
	other := u.locker()
	if leader, err := other.Leader(ctx, "lock.jobs"); err != nil || leader.Term != lead.Term() {
		return fmt.Errorf("Leader: want term %d, got %+v, %v", lead.Term(), leader, err)
	}
	if err := lead.Resign(ctx); err != nil {
		return fmt.Errorf("Resign: %w", err)
	}
	if _, err := other.Leader(ctx, "lock.jobs"); !errors.Is(err, ErrNoLeader) {
		return fmt.Errorf("Leader after Resign: want ErrNoLeader, got %v", err)
	}
	return nil
}

// useServerClock: a ServerClock made through the user's client, as the
// clock of a Locker.
func useServerClock(u *aclUser) error {
	client := u.client()
	clock, err := NewServerClock(ctx, client, time.Hour)
	if err != nil {
		return err
	}
	defer clock.Close()
	return u.lockerOn(client, WithClock(clock)).acquireAndRelease("lock.clocked")
}

// useWakeups: a waiter blocked in Acquire subscribes to the key's
// releases; the holder's release publishes and hands the lock over.
func useWakeups(u *aclUser) error {
	// Bare values: Lockers that cannot queue wait for wake-ups whatever
	// the user may do (see handoff.go). The holder is a Locker that hands
	// over (of a user allowed everything), whose release publishes only
	// for a waiter listed in the key's queue; the waiter's backoff is an
	// hour, so only the wake-up can serve it.
	holder, err := u.lockerOn(u.server.admin, WithFormat(UnixMillis)).TryAcquire(ctx, "lock.wake")
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	acquired := make(chan error, 1)
	go func() {
		lock, err := u.locker(WithFormat(UnixMillis), WithBackoff(time.Hour, time.Hour)).Acquire(waitCtx, "lock.wake")
		if err == nil {
			err = lock.Release(ctx)
		}
		acquired <- err
	}()
	// Release only once the waiter has subscribed and listed itself in
	// the key's queue (wakelisten.go), or been refused.
	for !u.subscribed(WakeChannel("lock.wake")) || !u.listed("lock.wake") {
		if waitCtx.Err() != nil {
			return errors.New("the waiter neither subscribed and listed itself nor was refused")
		}
		time.Sleep(time.Millisecond)
	}
	if err := holder.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if err := <-acquired; err != nil { // bounded: the waiter's Acquire runs under waitCtx
		return fmt.Errorf("waiter: %w", err)
	}
	return nil
}

// useHandoff: a waiter that gives up leaves the key's queue; another
// queues, and the holder's release hands the key straight to it: no DEL
// runs between the two holders (a release that hands over in order: the
// clock stands still, so no waiter has waited out the default threshold).
func useHandoff(u *aclUser) error { return handoffWith(u, true) }

// useHandoffCommands is useHandoff on the commands: the queue and the
// handoff in watched transactions (commandqueue.go).
func useHandoffCommands(u *aclUser) error { return handoffWith(u, false, WithoutScripts()) }

// handoffWith is useHandoff with opts; byScripts requires that the scripts
// did it all, not the commands after a refused script (no WATCH).
func handoffWith(u *aclUser, byScripts bool, opts ...Option) error {
	const key = "lock.handoff"
	watches := u.server.calls("watch")
	holder, err := u.locker(append([]Option{scripted}, opts...)...).TryAcquire(ctx, key)
	if err != nil {
		return err
	}
	quitCtx, quit := context.WithTimeout(ctx, 50*time.Millisecond)
	defer quit()
	if _, err := u.locker(opts...).Acquire(quitCtx, key); !errors.Is(err, ErrNotAcquired) {
		return fmt.Errorf("a waiter that gave up: %v", err)
	}
	if n := u.server.admin.ZCard(ctx, waitersKey(key)).Val(); n != 0 {
		return fmt.Errorf("a waiter that gave up left %d entries in the queue", n)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	acquired := make(chan *Lock, 1)
	go func() {
		lock, _ := u.locker(opts...).Acquire(waitCtx, key)
		claimSettled(lock)
		acquired <- lock
	}()
	for u.server.admin.ZCard(ctx, waitersKey(key)).Val() == 0 {
		if waitCtx.Err() != nil {
			return fmt.Errorf("the waiter never queued (refused: %v)", u.refusals())
		}
		time.Sleep(time.Millisecond)
	}
	dels := u.server.calls("del")
	if err := holder.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	lock := <-acquired // bounded: the waiter's Acquire runs under waitCtx
	if lock == nil {
		return errors.New("the waiter did not acquire")
	}
	if n := u.server.calls("del"); n != dels {
		return fmt.Errorf("the release deleted the key (%d DEL) instead of handing it over", n-dels)
	}
	if n := u.server.calls("watch"); byScripts && n != watches {
		return fmt.Errorf("the commands took over from the scripts (%d WATCH)", n-watches)
	}
	return lock.Release(ctx)
}

// subscribed reports whether someone listens on channel, or the user was
// refused a subscription.
// listed reports whether a wait on key's wake-ups listed itself in the
// key's queue, or was refused.
func (u *aclUser) listed(key string) bool {
	n, err := u.server.admin.ZCard(ctx, waitersKey(key)).Result()
	require.NoError(u.t, err)
	return n > 0 || slices.ContainsFunc(u.refusals(), func(r string) bool {
		return r == "command zadd" || r == "command pttl" || r == "key "+waitersKey(key)
	})
}

func (u *aclUser) subscribed(channel string) bool {
	n, err := u.server.admin.PubSubNumSub(ctx, channel).Result()
	require.NoError(u.t, err)
	if n[channel] > 0 {
		return true
	}
	for _, r := range u.refusals() {
		if r == "command subscribe" || strings.HasPrefix(r, "channel ") {
			return true
		}
	}
	return false
}

// useReleaseMarker: ForceRelease leaves the trace of the token it broke
// in the key's marker, by which the broken holder's Release reports
// ErrNotHeld rather than take the missing key for its own earlier release
// (H5, forcetrace.go).
func useReleaseMarker(u *aclUser) error {
	l := u.locker()
	lock, err := l.TryAcquire(ctx, "lock.marked")
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if _, err := u.locker().ForceRelease(ctx, "lock.marked"); err != nil {
		return fmt.Errorf("force release: %w", err)
	}
	if err := lock.Release(ctx); !errors.Is(err, ErrNotHeld) {
		return fmt.Errorf("the broken holder's release did not see the trace: %v", err)
	}
	if !l.caps.allows(capReleaseMarker) {
		return errors.New("the release marker was switched off")
	}
	return nil
}
