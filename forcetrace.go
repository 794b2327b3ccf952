package setnxlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The trace of a forced release (H5 without a marker on every release).
// A release of a token value that finds the key no longer ours while our
// lease is live by our clock was released by us, in an earlier run whose
// reply was lost (go-redis resent it, or Release is called again), or
// broken by an operator's ForceRelease: no client takes a live lease over
// (H4). So releases of token values write nothing to remember themselves;
// ForceRelease instead leaves a trace of the token it broke, in the key's
// marker (releasedKey), scored by when the broken lease is over by every
// clock within the skew margin, for the rest of that lease. A release
// reads the trace only on that rare not-ours path. (A failover that lost
// the key, H9, looks the same as our own release: Done/Err and
// WithReplicas are the tools for that.) Bare timestamp values carry no
// token: their scripted releases keep remembering each run by its own id
// (release.lua).

// forceDelete deletes key while it holds exactly value (ForceRelease), and
// leaves the trace of value's token, if it has one, in the same
// transaction. A user refused the marker key turns the marker off and
// deletes without the trace: the broken holder's Release then reports nil,
// as after a failover.
func (l *Locker) forceDelete(ctx context.Context, key, value string) (bool, error) {
	owned := func(current string) bool { return current == value }
	token := tokenOf(value)
	end, err := heldUntil(value)
	if token == "" || err != nil || !l.caps.allows(capReleaseMarker) {
		return l.compareAndWrite(ctx, key, owned, func(pipe redis.Pipeliner) { pipe.Del(ctx, key) })
	}
	marker := releasedKey(key)
	until := l.takeableAt(end)
	var ttl *redis.DurationCmd
	deleted, err := l.watchedWrite(ctx, key, watched{
		also:  []string{marker},
		read:  func(pipe redis.Pipeliner) { ttl = pipe.PTTL(ctx, marker) },
		owned: owned,
		write: func(pipe redis.Pipeliner) error {
			pipe.Del(ctx, key)
			now := l.cfg.clock.Now()
			rest := until.Sub(now)
			if rest < time.Millisecond {
				return nil // over by every clock: its holder's Release knows it lost the lease
			}
			pipe.ZRemRangeByScore(ctx, marker, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
			pipe.ZAdd(ctx, marker, redis.Z{Score: float64(until.UnixMilli()), Member: token})
			if ttl.Val() < rest { // never cuts the trace of a longer lease short
				pipe.PExpire(ctx, marker, rest)
			}
			return nil
		},
	})
	if l.caps.narrow(capReleaseMarker, err) {
		return l.forceDelete(ctx, key, value)
	}
	return deleted, err
}

// forcedAwayFrom reports whether an operator's ForceRelease broke the
// lease of k on key (its key, or a member of its group), a lock of token
// values whose release found the key not ours: the trace of its token is
// in the key's marker. A ForceRelease of a version
// that read a value's token as everything after its first separator
// traced "<token>|<identity>" for a value carrying an identity (value.go):
// that trace counts too, in the same round trip. Without a token, or when
// the trace cannot be read, it reports false.
func (l *Locker) forcedAwayFrom(ctx context.Context, k *Lock, key string) bool {
	if k.token == "" || !l.caps.allows(capReleaseMarker) {
		return false
	}
	marker := releasedKey(key)
	traces := []string{k.token}
	if _, older, _ := strings.Cut(k.value, string(tokenSeparator)); older != k.token {
		traces = append(traces, older)
	}
	cmds, err := l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, trace := range traces {
			pipe.ZScore(ctx, marker, trace)
		}
		return nil
	})
	for _, cmd := range cmds {
		if cmd.Err() == nil {
			return true
		}
	}
	if !errors.Is(err, redis.Nil) {
		l.caps.narrow(capReleaseMarker, err)
	}
	return false
}
