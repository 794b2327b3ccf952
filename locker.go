package setnxlock

import (
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Locker hands out locks on Redis keys. It is safe for concurrent use; create
// one per client and configuration and share it.
type Locker struct {
	client  redis.UniversalClient
	cfg     config
	pending pendingWrites
	// lostGroups: group writes whose reply was lost and whose undo failed
	// (H5, acquiremany.go), apart from pending: a single-key attempt never
	// claims a group's value.
	lostGroups pendingWrites

	caps    capabilities // what the server and user still allow
	single  bool         // the client is one server's (*redis.Client): the queue's PUBLISH counts are its own
	handoff handoffs     // the Locker's subscription to keys handed to it (handoff.go)
	args    lockerArgs   // arguments its options fix, boxed once (scriptcall.go)

	election electionLocker // the Locker elections run on, made on first use (election.go)

	permitFences sync.Map // a semaphore's permit key → its semaphore's fence counter (fenceCounter)
	permitQueues sync.Map // a semaphore's permit key → its permitLine: the semaphore's one queue (waitersOf) and count
}

// New returns a Locker that locks keys through client. It returns an error
// matching ErrInvalidArgument, and sends nothing to Redis, when client is nil
// or an option is out of range.
func New(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidArgument)
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil Option", ErrInvalidArgument)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkReplicasClient(client, cfg); err != nil {
		return nil, err
	}
	return newLocker(client, cfg), nil
}

// newLocker builds a Locker of a validated configuration: New's, or one
// derived from it (elections.go).
func newLocker(client redis.UniversalClient, cfg config) *Locker {
	l := &Locker{client: client, cfg: cfg}
	l.boxArgs()
	l.handoff.id = newToken()
	_, l.single = client.(*redis.Client)
	if cfg.noScripts || cfg.classic {
		l.caps.disable(capScripts)
	}
	if cfg.classic {
		l.caps.disable(capSetNXPX)
		l.caps.disable(capSetGet)
	}
	return l
}

// isNil catches both a nil interface and a typed nil such as
// (*redis.Client)(nil), which would otherwise panic on first use.
func isNil(client redis.UniversalClient) bool {
	if client == nil {
		return true
	}
	v := reflect.ValueOf(client)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// TTL returns the lease length the Locker writes into lock values.
func (l *Locker) TTL() time.Duration { return l.cfg.ttl }

// Close stops the Locker's background listening for handed locks at once,
// instead of handoffLinger after its last waiter. Acquire calls still
// waiting leave their queues and go on waiting for wake-ups and polling.
// Close never fails and the Locker stays usable; call it when the Locker is
// no longer needed, so that no goroutine or connection of it outlives its
// use.
func (l *Locker) Close() error {
	l.handoff.stopIf(func() bool { return true })
	if el := l.election.made(); el != nil {
		_ = el.Close()
	}
	return nil
}
