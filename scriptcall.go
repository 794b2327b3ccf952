package setnxlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// A script called on the common path (a release, and acquire.lua where SET
// NX PX GET is not to be had) is sent as go-redis's
// Script.Run sends it, EVALSHA and then EVAL where the server answers
// NOSCRIPT, with the same arguments in the same order, but from one slice
// its caller builds: Run takes the keys and ARGV apart and copies both
// into a slice of its own, boxing the hash again on every call.

// lockerArgs are the arguments of a Locker's commands and scripts that its
// options fix, boxed once when the Locker is made: no call boxes them
// again. They are the very values the calls computed before (int64s).
type lockerArgs struct {
	ttlNet         int64  // safetyNet(ttl) in ms: the net (H6) of a lease of the Locker's TTL
	ttlNets        [3]any // ttlNet-1, ttlNet and ttlNet+1, what a format's rounding makes of it (netArg)
	provisionalNet any    // provisionalNet in ms (appendProtocolArgs)
	starvation     any    // the starvation threshold in µs: release.lua's ARGV[7] when it hands over
}

// boxArgs fills l.args from l's configuration.
func (l *Locker) boxArgs() {
	net := l.safetyNet(l.cfg.ttl).Milliseconds()
	l.args = lockerArgs{
		ttlNet:         net,
		ttlNets:        [3]any{net - 1, net, net + 1},
		provisionalNet: l.provisionalNet().Milliseconds(),
		starvation:     l.cfg.starvation.Microseconds(),
	}
}

// netArg is the safety net (H6), in ms, of a lease of length, boxed: once
// and for all for the lengths of an attempt's lease, the Locker's TTL as
// the format rounds its end (a millisecond either way).
func (l *Locker) netArg(length time.Duration) any {
	ms := l.safetyNet(length).Milliseconds()
	if i := ms - l.args.ttlNet + 1; i >= 0 && i < int64(len(l.args.ttlNets)) {
		return l.args.ttlNets[i]
	}
	return ms
}

// scriptCall is a script as a caller of run sends it: its hash and its
// source, boxed once as arguments of a command.
type scriptCall struct{ sha, src any }

// callOf prepares script s, whose source is src, for run.
func callOf(s *redis.Script, src string) scriptCall { return scriptCall{sha: s.Hash(), src: src} }

// args returns the start of a call's arguments with room for n more:
// EVALSHA, the script's hash and numKeys. The caller appends numKeys
// keys, then ARGV.
func (s scriptCall) args(numKeys, n int) []any {
	return append(make([]any, 0, 3+n), "evalsha", s.sha, numKeys)
}

// run sends args (built from args) as EVALSHA and, where the server does
// not have the script, again as EVAL, and returns the last command sent.
// The first key is where a Cluster client routes the call, as Run's.
func (s scriptCall) run(ctx context.Context, client redis.UniversalClient, args []any) *redis.Cmd {
	cmd := s.send(ctx, client, args)
	if err := cmd.Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return cmd
	}
	eval := append([]any{"eval", s.src}, args[2:]...) // a copy: the EVALSHA command keeps its arguments
	return s.send(ctx, client, eval)
}

// send processes one EVALSHA or EVAL whose arguments are args.
func (s scriptCall) send(ctx context.Context, client redis.UniversalClient, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	if numKeys, _ := args[2].(int); numKeys > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = client.Process(ctx, cmd)
	return cmd
}
