package chaos

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// The key sampler: every few milliseconds the harness reads each lock
// key's value and queue of waiters straight from the server (not through
// a proxy) and records every change. It decides nothing; it is there so
// that a violation or a slow free wait can be explained by what the
// server held, and by whom it was queued (docs/RELIABILITY.md).

// KeyState is what the server held for one key from At on.
type KeyState struct {
	At     time.Time
	Key    string
	Value  string   // "" when the key did not exist
	Queue  []string `json:",omitempty"` // its waiters' entries, first in line first
	Failed bool     `json:",omitempty"` // the sample failed (the server was restarting)
}

// sampleEvery is the sampler's period.
const sampleEvery = 5 * time.Millisecond

// sample runs the sampler until the run stops, on a single server.
func (h *harness) sample() {
	defer h.wg.Done()
	if h.servers.cluster {
		return
	}
	client := redis.NewClient(&redis.Options{Addr: h.servers.nodes[0].Addr(), PoolSize: 1, MaxRetries: -1,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond})
	defer client.Close()
	names := h.cfg.lockKeys()
	last := map[string]KeyState{}
	h.ticks(sampleEvery, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		pipe := client.Pipeline()
		gets := make([]*redis.StringCmd, len(names))
		queues := make([]*redis.StringSliceCmd, len(names))
		for i, k := range names {
			gets[i], queues[i] = pipe.Get(ctx, k), pipe.ZRange(ctx, waitersKey(k), 0, -1)
		}
		sent := time.Now()
		_, _ = pipe.Exec(ctx) // each command's own error says whether its sample failed
		at := time.Now()
		answered := true
		for i, k := range names {
			s := KeyState{At: at, Key: k}
			if failed(gets[i].Err()) || failed(queues[i].Err()) {
				s.Failed, answered = true, false
			} else {
				s.Value, s.Queue = gets[i].Val(), queues[i].Val()
			}
			if p, ok := last[k]; ok && p.Value == s.Value && p.Failed == s.Failed && slices.Equal(p.Queue, s.Queue) {
				continue
			}
			last[k] = s
			h.rec.keyState(s)
		}
		if answered && at.Sub(sent) > stallThreshold {
			// Answered, and late: the server served nobody meanwhile. A
			// sample that failed (a restart cut its connection, and its
			// read waited out the timeout) says nothing of the server.
			h.rec.serverStalled(Interval{From: sent, To: at})
		}
	})
}

// failed reports whether a sampled read failed: an error other than a
// missing key. A key of another type (a foreign value on a queue) is read
// as failed too, never as empty.
func failed(err error) bool { return err != nil && !errors.Is(err, redis.Nil) }
