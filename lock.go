package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Locker hands out locks on Redis keys. It is safe for concurrent use; create
// one per client and configuration and share it.
type Locker struct {
	client  redis.UniversalClient
	cfg     config
	pending pendingWrites

	scripts featureSwitch // the one-round-trip scripts (scripts.go)
	setNXPX featureSwitch // SET key value NX PX: SETNX and the safety net in one command
	wakeups featureSwitch // PUBLISH on release, SUBSCRIBE while waiting (wakeup.go)
	handoff handoffs      // releases hand the key to a queued waiter (handoff.go)

	transactionsChecked atomic.Bool // the server accepted MULTI (checkTransactions)
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
	l := &Locker{client: client, cfg: cfg}
	l.handoff.id = newToken()
	l.scripts.off.Store(cfg.noScripts || cfg.classic)
	l.setNXPX.off.Store(cfg.classic)
	return l, nil
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

// maxStartOvers bounds how often one attempt starts over because the key
// changed under it: it vanished between SETNX and GET (its holder released
// in between), or another client took an expired lease over first.
const maxStartOvers = 3

// TryAcquire makes one attempt to take the lock on key and returns
// ErrNotAcquired at once if another client holds a live lease. A lease whose
// expiry has passed by the Locker's clock is taken over (see deadlock.go).
func (l *Locker) TryAcquire(ctx context.Context, key string) (*Lock, error) {
	lock, _, err := l.tryAcquire(ctx, key, nil)
	return lock, err
}

// refusal is what a refused attempt learned about the lease that refused
// it, so that Acquire sleeps no longer than necessary.
type refusal struct {
	takeableAt time.Time // when the lease can be taken over; zero if unknown
	announced  bool      // its holder is a Locker, which announces its release (wakeup.go)
}

// tryAcquire is one attempt of the SETNX page's algorithm. When the lock is
// held it also returns what it learned about the holder's lease. A queued
// attempt (entry not nil, see handoff.go) writes entry's token, queues when
// refused, and takes a lease a release has handed to entry.
func (l *Locker) tryAcquire(ctx context.Context, key string, entry *queueEntry) (*Lock, refusal, error) {
	if key == "" {
		return nil, refusal{}, fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, refusal{}, fmt.Errorf("setnxlock: acquire %q: %w", key, err)
	}
	for range maxStartOvers {
		ours := l.newLease(l.cfg.clock.Now())
		if entry != nil {
			ours = l.cfg.format.newLease(l.cfg.clock.Now(), l.cfg.ttl, entry.token)
		}

		// Step 1: SETNX key <expiry>; step 2, when the key exists: GET it
		// to read whose lease it is.
		claimed, err := l.claimKey(ctx, key, ours, entry)
		if err != nil {
			// H5: the server may have applied SETNX and only the reply was
			// lost, or a 0 may have come from go-redis resending a SETNX
			// whose first copy was applied and the GET failed. Remember the
			// value so the next attempt recognises it as ours instead of
			// waiting out our own lease.
			l.remember(key, ours)
			return nil, refusal{}, err
		}
		if claimed.created {
			lock, err := l.grant(key, ours, claimed.fencingToken, EventAcquired)
			return lock, refusal{}, err
		}
		current := claimed.current
		if !claimed.found {
			continue // released between SETNX and GET: start over
		}
		now := l.cfg.clock.Now()
		if entry != nil && tokenOf(current) == entry.token {
			// A release handed us the key and its message has not reached
			// us (or was lost): the lease is ours while it lasts.
			if lock, err := l.takeHanded(key, current); err == nil {
				return lock, refusal{}, nil
			}
		}
		if write, ok := l.recognise(key, current, ours, now); ok {
			if l.cfg.fencing {
				// The lease is ours but its fencing token went with the
				// lost reply: give the lease up and start over for a new one.
				if _, err := l.compareAndWrite(ctx, key,
					func(current string) bool { return current == write.value },
					func(pipe redis.Pipeliner) { pipe.Del(ctx, key) }); err != nil {
					return nil, refusal{}, fmt.Errorf("setnxlock: %q: %w", key, err)
				}
				continue
			}
			l.setSafetyNet(ctx, key, write) // H6: the write whose reply was lost may not have got its net
			lock, err := l.grant(key, write, 0, EventAcquired)
			return lock, refusal{}, err
		}
		holderExpiry, err := parseExpiry(current)
		if err != nil {
			return nil, refusal{}, fmt.Errorf("setnxlock: key %q: %w", key, err) // H7: left untouched
		}
		// H4: a foreign lease is over only a skew margin after the end it
		// states, so a clock that runs ahead by less cannot end it early.
		takeable := holderExpiry.Add(l.cfg.skewMargin)
		if !expired(takeable, now) {
			l.observe(Event{Kind: EventContended, Key: key, ExpiresAt: takeable})
			return nil, refusal{takeableAt: takeable, announced: tokenOf(current) != ""}, fmt.Errorf("%w: %q is held until %s", ErrNotAcquired, key, holderExpiry.UTC().Format(time.RFC3339Nano))
		}

		// Step 3: the holder's lease has expired: try to take it over.
		lock, startOver, err := l.takeOver(ctx, key, current)
		if !startOver {
			if err == nil && entry != nil { // the refused claim queued us
				// Won outside the queue: our entry must not be handed the
				// key later. Best effort: a stale entry is skipped once
				// our Locker stops listening.
				_ = l.client.LRem(ctx, waitersKey(key), 0, entry.member).Err()
			}
			return lock, refusal{}, err
		}
	}
	return nil, refusal{}, fmt.Errorf("%w: %q changed under us %d times in one attempt", ErrNotAcquired, key, maxStartOvers)
}

// newLease is a lease of the Locker's TTL beginning at now, in its format,
// with a fresh owner token where the format carries one.
func (l *Locker) newLease(now time.Time) lease {
	token := ""
	if l.cfg.format.tokens() {
		token = newToken()
	}
	return l.cfg.format.newLease(now, l.cfg.ttl, token)
}

// remember records a write whose reply was lost (H5), where the format lets
// us recognise it later. A bare timestamp does not: another client writing
// in the same millisecond (or second) with the same TTL writes the very same
// value, so claiming it could hand one lease to two clients. Without a
// token the Locker waits a lost write out instead, as classic clients do.
func (l *Locker) remember(key string, write lease) {
	if l.cfg.format.tokens() {
		l.pending.remember(key, write, l.cfg.clock.Now())
	}
}

// recognise reports whether current, found at key after our SETNX answered
// 0, is a value only we can have written (H5): either go-redis resent this
// attempt's SETNX after losing the reply of a first copy that was applied,
// or it is a remembered write. Only token values are recognised; see
// remember.
func (l *Locker) recognise(key, current string, attempt lease, now time.Time) (lease, bool) {
	if !l.cfg.format.tokens() {
		return lease{}, false
	}
	if current == attempt.value {
		return attempt, true
	}
	return l.pending.claim(key, current, now)
}

// grant hands out the lock we just won, unless its lease already ended
// while we waited for Redis's reply (a stall like H8's): a Lock that is over
// before the caller sees it would only invite work outside the lease.
func (l *Locker) grant(key string, won lease, fencingToken int64, kind EventKind) (*Lock, error) {
	if expired(won.expiry, l.cfg.clock.Now()) {
		return nil, fmt.Errorf("%w: %q: our lease ended before the reply arrived", ErrNotAcquired, key)
	}
	lock := &Lock{
		locker: l, key: key, token: tokenOf(won.value), value: won.value, fencingToken: fencingToken,
		expiresAt: won.expiry, renewedAt: won.start,
		op: make(chan struct{}, 1), done: make(chan struct{}), moved: make(chan struct{}, 1),
	}
	if !l.cfg.format.tokens() {
		lock.token = ""
	}
	l.observe(Event{Kind: kind, Key: key, ExpiresAt: won.expiry, FencingToken: fencingToken})
	if l.cfg.autoRefresh {
		lock.startWatch()
	}
	return lock, nil
}

// safetyNet is how long Redis keeps a key whose lease ends in remaining:
// the lease, then the grace period (H6).
func (l *Locker) safetyNet(remaining time.Duration) time.Duration {
	if l.cfg.grace > 0 {
		return remaining + l.cfg.grace
	}
	return remaining + l.cfg.ttl
}

// setSafetyNet gives a key we just created with SETNX its Redis expiry
// (H6). SETNX cannot carry one, and sending PEXPIRE blindly alongside it
// would touch someone else's key when SETNX fails, so it follows the win,
// at once, before anything that may stall. The PEXPIRE itself is not
// conditional, so its length is the whole lease plus the grace, counted
// from the moment it is sent: even sent late, after a stall past our lease,
// onto a successor's key, it cannot end before a lease of up to TTL + grace
// that the successor began earlier. It is best effort: if it fails, the key
// behaves like a classic lock until a refresh or a takeover sets the net.
func (l *Locker) setSafetyNet(ctx context.Context, key string, won lease) {
	_ = l.client.PExpire(ctx, key, l.safetyNet(won.length())).Err()
}

// Acquire takes the lock on key, waiting while another client holds it.
// Where it can it queues on the key, and a Locker's Release hands it the
// lock directly, in order of arrival (handoff.go; see Locker.Close);
// otherwise it is woken as soon as a Locker releases the key (pub/sub, see
// WakeChannel). Either way it also retries with exponential backoff and
// jitter (WithBackoff), never sleeping much past the holder's lease when
// that is known; it retries transient network errors. It has no deadline of its own: when
// ctx ends first it returns an error matching both ErrNotAcquired and
// ctx.Err().
func (l *Locker) Acquire(ctx context.Context, key string) (*Lock, error) {
	backoff := newBackoff(l.cfg.minBackoff, l.cfg.maxBackoff)
	var released *wakeup
	defer func() { released.close() }()
	if l.queues() && l.handoff.listening() {
		// Already listening (another wait of this Locker, or a recent
		// one): the first attempt may as well queue, saving a refused
		// round trip when the key is held. It costs nothing when it is not.
		if lock, err, queued := l.waitInQueue(ctx, key); queued {
			return lock, err
		}
	}
	for {
		lock, refused, err := l.tryAcquire(ctx, key, nil)
		if err == nil {
			return lock, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, contextEnded(key, ctxErr, err)
		}
		if !retryable(err) {
			return nil, err
		}
		if released == nil && errors.Is(err, ErrNotAcquired) {
			if l.queues() {
				if lock, err, queued := l.waitInQueue(ctx, key); queued {
					return lock, err
				}
			}
			if released = l.subscribe(ctx, key); released != nil {
				continue // attempt once more now that no release can go unheard
			}
		}
		wait := backoff.next()
		if released != nil && refused.announced {
			// The holder will announce its release: polling would only
			// load Redis. Poll rarely, in case the announcement is lost.
			wait = max(wait, announcedPoll)
		}
		if !refused.takeableAt.IsZero() {
			wait = capAtLease(wait, refused.takeableAt.Sub(l.cfg.clock.Now()), l.cfg.minBackoff)
		}
		if err := released.sleep(ctx, wait); err != nil {
			return nil, contextEnded(key, err, nil)
		}
	}
}

// contextEnded is Acquire's error when its context ends: it matches
// ErrNotAcquired and the context's error, and keeps the last attempt's error
// for the message.
func contextEnded(key string, ctxErr, last error) error {
	if last != nil && !errors.Is(last, ErrNotAcquired) && !errors.Is(last, ctxErr) {
		return fmt.Errorf("%w: %q: %w (last attempt: %v)", ErrNotAcquired, key, ctxErr, last)
	}
	return fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ctxErr)
}

// retryable reports whether Acquire should try again after err: yes when
// the lock was held, for transport failures (timeouts, dropped connections)
// and for server replies that say "not now"; no for bad input, foreign
// values (H7), a server that ignores WATCH, and other error replies, which a
// retry would only repeat.
func retryable(err error) bool {
	switch {
	case errors.Is(err, ErrNotAcquired), errors.Is(err, redis.TxFailedErr):
		return true
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrNotLockValue), errors.Is(err, ErrWatchIgnored), errors.Is(err, ErrNoTransactions):
		return false
	}
	var redisErr redis.Error
	if !errors.As(err, &redisErr) {
		return true
	}
	for _, transient := range []string{"LOADING ", "READONLY ", "TRYAGAIN ", "CLUSTERDOWN ", "MASTERDOWN ", "BUSY "} {
		if strings.HasPrefix(redisErr.Error(), transient) {
			return true
		}
	}
	return false
}

// Lock is a lease on one key, returned by TryAcquire or Acquire. Its methods
// are safe for concurrent use.
type Lock struct {
	locker *Locker
	key    string

	fencingToken int64 // 0 without WithFencing

	op        chan struct{} // a one-slot semaphore serialising the calls that talk to Redis; waiting on it honours ctx
	releasing atomic.Bool   // Release was called: stop renewing, whatever its outcome
	token     string        // TokenFormat: in every value we write for this lease; ownership is carrying it
	value     string        // guarded by op: without a token, ownership is holding exactly this value
	maybe     []string      // guarded by op: values refreshes in doubt may have written instead
	released  bool          // guarded by op
	inDoubt   bool          // guarded by op: a Release failed in transit and may have deleted the key

	mu        sync.Mutex // guards expiresAt and err, so reading them never waits on Redis
	expiresAt time.Time  // end of our lease by the Locker's clock
	renewedAt time.Time  // when the current lease began: auto-refresh counts its interval from here
	err       error      // why done was closed: nil after Release, ErrNotHeld after a loss

	done      chan struct{} // closed once, by finish, when the lock is released or lost
	moved     chan struct{} // nudges the watch when Refresh moves the end of the lease
	finished  sync.Once
	watching  sync.Once
	watchDone chan struct{} // closed when the watch goroutine has returned; nil if none started
}

// Key returns the Redis key the lock is held on.
func (k *Lock) Key() string { return k.key }

// ExpiresAt returns the end of the lease: after this instant, by the
// Locker's clock, other clients may take the lock over.
func (k *Lock) ExpiresAt() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.expiresAt
}

// Release gives the lock up. It deletes the key only if it still holds our
// value, atomically (H3). It returns an error matching ErrNotHeld, and leaves
// any other owner's key alone, when our lease has already expired or the key
// is no longer ours; an expired value that is still ours is deleted as a
// courtesy, but the caller is still told the lease was lost. A Release that
// failed with a network error may be called again; calling it again after
// it succeeded returns ErrNotHeld.
func (k *Lock) Release(ctx context.Context) error {
	k.releasing.Store(true) // no more renewals, even if this call fails
	err := k.release(ctx)
	k.awaitWatch(ctx)
	return err
}

func (k *Lock) release(ctx context.Context) error {
	if err := k.lockOp(ctx, "release"); err != nil {
		return err
	}
	defer k.unlockOp()
	if err := k.usable(ctx, "release"); err != nil {
		return err
	}
	expiresAt := k.ExpiresAt()
	live := !expired(expiresAt, k.locker.cfg.clock.Now())
	deleted, err := k.locker.deleteIfOwned(ctx, k)
	if err != nil {
		k.inDoubt = true
		return fmt.Errorf("setnxlock: release %q: %w", k.key, err)
	}
	k.released = true
	switch {
	case !live:
		return k.finish(fmt.Errorf("%w: the lease on %q expired at %s", ErrNotHeld, k.key, expiresAt.UTC().Format(time.RFC3339Nano)))
	case !deleted && !k.inDoubt:
		return k.finish(fmt.Errorf("%w: %q no longer holds our value", ErrNotHeld, k.key))
	}
	// Deleted now, or by the earlier attempt whose reply was lost: while our
	// lease is live nobody else can have removed our value.
	return k.finish(nil)
}

// deleteIfOwned deletes the lock's key if it still holds our value (H3),
// atomically, and announces the release to waiters: one script where
// scripts run, else WATCH/GET/MULTI/DEL/PUBLISH/EXEC.
func (l *Locker) deleteIfOwned(ctx context.Context, k *Lock) (bool, error) {
	if l.scripts.usable() {
		handing := l.handsOver()
		deleted, err := l.scriptedRelease(ctx, k)
		if handing && refused(err) {
			// The ACL user may run scripts but not touch the queue: stop
			// handing over rather than stop scripting (handoff.go).
			l.handoff.off.Store(true)
			deleted, err = l.scriptedRelease(ctx, k)
		}
		if !l.scripts.fallBackIfRefused(err) {
			return deleted, err
		}
	}
	publish := l.wakeups.usable()
	deleted, err := l.compareAndWrite(ctx, k.key, k.owns, func(pipe redis.Pipeliner) {
		pipe.Del(ctx, k.key)
		if publish {
			pipe.Publish(ctx, WakeChannel(k.key), k.key)
		}
	})
	if publish && l.wakeups.fallBackIfRefused(err) {
		return l.deleteIfOwned(ctx, k) // the refused PUBLISH aborted the transaction: again without it
	}
	return deleted, err
}

// lockOp waits for the lock's turn to talk to Redis, or for ctx to end.
func (k *Lock) lockOp(ctx context.Context, verb string) error {
	select {
	case k.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("setnxlock: %s %q: %w", verb, k.key, ctx.Err())
	}
}

func (k *Lock) unlockOp() { <-k.op }

// usable refuses, before any round trip, a call on a released lock or with
// a context that has already ended. The caller holds the op slot.
func (k *Lock) usable(ctx context.Context, verb string) error {
	if k.released {
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, k.key)
	}
	if k.inDoubt && k.token == "" {
		// A bare value cannot tell our lease from a successor's written in
		// the same millisecond (or second): if the Release whose reply was
		// lost deleted the key, another Release or a Refresh might hit the
		// successor's identical value (H3). Leave the key to its expiry.
		k.released = true
		return k.finish(fmt.Errorf("%w: %q: an earlier Release may have deleted it; without an owner token the key is left to expire", ErrNotHeld, k.key))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("setnxlock: %s %q: %w", verb, k.key, err)
	}
	return nil
}

// owns reports whether a value at our key is ours (H3): it carries our
// lease's token, or, in a format without tokens, it is exactly the value we
// last wrote. A refresh whose reply was lost may have replaced our value
// with a newer one of ours, and both are recognised. The caller holds the
// op slot.
func (k *Lock) owns(current string) bool {
	switch {
	case !ownerCheck:
		return true
	case k.token != "":
		return tokenOf(current) == k.token
	}
	return current == k.value || slices.Contains(k.maybe, current)
}
