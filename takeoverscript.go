package setnxlock

import (
	"context"
	_ "embed" // takeover.lua
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The scripted takeover: where the server runs Lua, the takeover of an
// expired lease (deadlock.go) is one round trip instead of the watched
// transaction's two. takeover.lua does the very same conditional step,
// atomically: it writes only while the key holds the value judged expired
// (H1, H2: a loser writes nothing; H10: a late copy finds a later value,
// or none, and writes nothing), with the safety net (H6), the fencing
// token and a queued wait's leaving the queue in the same step.

//go:embed lua/takeover.lua
var takeoverLua string

var takeoverScript = redis.NewScript(takeoverLua)

// The outcomes of the takeover script (takeover.lua).
const (
	takeoverMoved      = 0
	takeoverWritten    = 1
	takeoverForeign    = 2
	takeoverNotCounter = 3
)

// takeOver runs takeover.lua.
func (p scriptPath) takeOver(ctx context.Context, key, expiredValue string, ours stamp) (takeover, error) {
	l := p.l
	keys := make([]string, 2, 3)
	keys[0], keys[1] = key, ""
	entry := ""
	if ours.queuedWait != "" {
		keys[1], entry = l.waitersOf(key), l.queueEntryOf(key, ours.queuedWait).member
	}
	if l.cfg.fencing {
		if keys[1] == "" {
			keys[1] = key // unused: a placeholder in the key's own slot (Cluster)
		}
		keys = append(keys, p.l.fenceCounter(key))
	} else if entry == "" {
		keys = keys[:1]
	}
	reply, err := takeoverScript.Run(ctx, l.client, keys, expiredValue, ours.value, l.safetyNet(ours.length()).Milliseconds(), entry).Slice()
	if err != nil {
		if !refused(err) {
			// H5: the script may have run before its reply was lost; the
			// key then holds our value, rightfully (it held the expired
			// one), and the next attempt recognises it.
			l.remember(key, ours)
		}
		return takeover{}, fmt.Errorf("setnxlock: take over %q: %w", key, err)
	}
	switch outcome := scriptOutcome(reply); {
	case outcome == takeoverWritten && len(reply) == 3:
		token, _ := reply[1].(int64)
		failed, _ := reply[2].(string)
		l.caps.narrow(capQueue, scriptErr(failed)) // the ACL user may not take entries off the queue
		return takeover{written: true, fencingToken: token}, nil
	case outcome == takeoverMoved:
		// H5: go-redis resends a script whose reply it lost, and the copy
		// finds the key moved: to our own value, if the first copy ran.
		// Remembered, the next attempt recognises it instead of waiting
		// out its own lease (review 24); a value never written matches
		// nothing.
		l.remember(key, ours)
		return takeover{}, nil
	case outcome == takeoverForeign:
		return takeover{}, fmt.Errorf("setnxlock: key %q: %w", key, ErrNotLockValue)
	case outcome == takeoverNotCounter:
		return takeover{}, errFenceNotCounter(p.l.fenceCounter(key))
	}
	return takeover{}, errors.New("setnxlock: unexpected reply from the takeover script")
}
