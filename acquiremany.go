package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Acquiring several keys at once: all of them or none, in one watched
// transaction. Every key gets the same value, a classic lock value that
// the page's recovery understands (a crashed group's keys are taken over
// one by one by single-key lockers, or as a group), with one lease and,
// with WithFencing, one token. The transaction (claimGroup):
//
//	WATCH every key (and, with fencing, every key's fence counter)
//	GET every key (and counter), in the round trip of the WATCH
//	judge each key as judge does: a live lease refuses the group (H4);
//	    anything but a lock value refuses it, untouched (H7)
//	MULTI
//	    MSETNX the keys when every one was missing (Redis 1.0.1), else
//	    GETSET each: the watched takeover of the expired ones (H1: never
//	    DEL-then-SETNX), whose replaced values are checked against the
//	    ones judged, as the page checks GETSET's (H2; tookOverGroup)
//	    PEXPIRE every key: the safety net (H6), relative
//	    with fencing: SET every counter to the group's token, one more
//	    than the highest counter read
//	EXEC: aborted when any watched key changed: look again
//
// Being one transaction, a crash between keys cannot leave a partial
// group, and groups that overlap in any order never deadlock: nobody holds
// one key while waiting for another. H10: every write is inside the
// watched transaction, so a copy of it arriving late applies only if no
// watched key changed since its WATCH, and never on anyone's later value.

// TryAcquireMany makes one attempt to take the locks on every one of keys
// at once, all or none, and returns ErrNotAcquired at once, with nothing
// written, if another client holds a live lease on any of them (the error
// names one such key and its lease's end). Leases whose expiry has passed
// by the Locker's clock are taken over with the free keys, in the same
// transaction.
//
// The Lock returned holds every key with one lease: Key is the first of
// keys, Keys all of them; Release deletes every key still holding our
// value; Refresh and auto-refresh renew all of them or none, and the lock
// is lost (Done, Err) as soon as any key is found not ours; with
// WithFencing, FencingToken is one token greater than every token issued
// before on any of the keys, and every later token of any key exceeds it.
//
// Keys must be non-empty, distinct and not the library's own keys
// (FenceKey, ...); on a Redis Cluster (a *redis.ClusterClient) they must
// hash to one slot (ErrCrossSlot; give them one hash tag). Bad input
// returns ErrInvalidArgument and writes nothing. Groups are never queued
// for (see AcquireMany). Every path takes a group with WATCH/MULTI/EXEC,
// no script: a server or user that refuses MULTI gets ErrNoTransactions.
// Each key holds an ordinary lock value, which single-key lockers see
// held, and take over once the group's lease is over.
func (l *Locker) TryAcquireMany(ctx context.Context, keys ...string) (*Lock, error) {
	ctx, end := l.beginCall(ctx, CallTryAcquire, firstKey(keys))
	acq := l.newAcquireCall()
	lock, _, err := l.tryAcquireMany(ctx, keys, &acq)
	if end != nil {
		end(CallResult{Event: acq.won, Err: err})
	}
	return lock, err
}

// firstKey is the key a group is named by: its first, or "" for none.
func firstKey(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

// checkGroup refuses, before anything is written, a group the transaction
// could not lock as one: no keys, an empty or repeated key, a key of the
// library's own (isLibraryKey), or on a Cluster keys (or, with fencing,
// their counters) in different slots.
func (l *Locker) checkGroup(keys []string) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: no keys", ErrInvalidArgument)
	}
	seen := make(map[string]struct{}, len(keys))
	for _, key := range keys {
		if key == "" {
			return fmt.Errorf("%w: empty key", ErrInvalidArgument)
		}
		if isLibraryKey(key) {
			return fmt.Errorf("%w: %q is named as one of the library's own keys", ErrInvalidArgument, key)
		}
		if _, repeated := seen[key]; repeated {
			return fmt.Errorf("%w: %q is given twice", ErrInvalidArgument, key)
		}
		seen[key] = struct{}{}
	}
	if _, cluster := l.client.(*redis.ClusterClient); cluster {
		// The fence counters are watched with the keys: a key with '}'
		// outside a hash tag has its counter in another slot (FenceKey).
		slot := keySlot(keys[0])
		for _, key := range slices.Concat(keys[1:], l.groupCounters(keys)) {
			if other := keySlot(key); other != slot {
				return fmt.Errorf("%w: %q is in slot %d, %q in slot %d", ErrCrossSlot, keys[0], slot, key, other)
			}
		}
	}
	return nil
}

// tryAcquireMany is one attempt at the group; when a key is held it also
// returns what it learned of the leases holding the group's keys.
func (l *Locker) tryAcquireMany(ctx context.Context, keys []string, acq *acquireCall) (*Lock, heldLease, error) {
	acq.attempts++
	if err := l.checkGroup(keys); err != nil {
		return nil, heldLease{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, heldLease{}, fmt.Errorf("setnxlock: acquire %q: %w", keys, err)
	}
	won, held, err := l.claimGroup(ctx, keys)
	if err != nil {
		return nil, held, err
	}
	lock, err := l.grantGroup(ctx, keys, won, acq)
	return lock, heldLease{}, err
}

// groupWin is a group the transaction wrote: its value, the group's
// fencing token, and whether any key was taken over (EventRecovered).
type groupWin struct {
	ours         stamp
	fencingToken int64
	recovered    bool
}

// claimGroup is the group's transaction (see the top of this file).
func (l *Locker) claimGroup(ctx context.Context, keys []string) (win groupWin, held heldLease, err error) {
	counters := l.groupCounters(keys)
	sent := false // a transaction went out: its EXEC may have applied
	var setnx *redis.BoolCmd
	var getsets []*redis.StringCmd // the takeover's, one per key
	var judged []read              // what the watch read at each key
	err = l.watchAll(ctx, append(slices.Clone(keys), counters...), func(tx *redis.Tx, reads []read) error {
		now := l.cfg.clock.Now()
		var free bool
		judged = reads[:len(keys)]
		free, held, err = l.judgeGroup(keys, judged, now)
		if err != nil {
			return errors.Join(err, unwatch(ctx, tx))
		}
		var token int64
		if l.cfg.fencing {
			if token, err = groupFencingToken(counters, reads[len(keys):]); err != nil {
				return errors.Join(err, unwatch(ctx, tx))
			}
		}
		win = groupWin{ours: l.attemptStamp(now, ""), fencingToken: token, recovered: !free}
		sent, setnx, getsets = true, nil, nil
		cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			if free {
				pairs := make([]any, 0, 2*len(keys))
				for _, key := range keys {
					pairs = append(pairs, key, win.ours.value)
				}
				setnx = pipe.MSetNX(ctx, pairs...) // every key missing: the classic command
			} else {
				// The page's takeover, under the WATCH (H1): GETSET each
				// key, so that the value each replaced can be checked
				// against the one judged (tookOverGroup, H2).
				getsets = make([]*redis.StringCmd, len(keys))
				for i, key := range keys {
					getsets[i] = redis.NewStringCmd(ctx, "getset", key, win.ours.value)
					_ = pipe.Process(ctx, getsets[i])
				}
			}
			for _, key := range keys {
				pipe.PExpire(ctx, key, l.safetyNet(win.ours.length())) // H6
			}
			for _, counter := range counters {
				pipe.Set(ctx, counter, token, 0) // every later INCR of any key's counter exceeds it
			}
			return nil
		})
		if errors.Is(err, redis.Nil) {
			// A GETSET that found its key missing, free to take, answers
			// nil: the EXEC ran, and tookOverGroup reads each GETSET's
			// reply. Any other command's failure is still the answer.
			err = nil
			for _, cmd := range cmds {
				if cmdErr := cmd.Err(); cmdErr != nil && !errors.Is(cmdErr, redis.Nil) {
					err = cmdErr
					break
				}
			}
		}
		return withCause(cmds, err)
	})
	switch {
	case errors.Is(err, redis.TxFailedErr):
		return groupWin{}, heldLease{}, fmt.Errorf("%w: %q changed under us %d times in one attempt", ErrNotAcquired, keys, maxTransactionAttempts)
	case err != nil && sent:
		// H5: the EXEC may have applied and only its reply was lost (a
		// lost EXEC is never resent: outside its WATCH it would be
		// unconditional). Nobody was granted the group: delete the keys
		// still holding our value now, rather than leave them held for a
		// lease nobody uses. If that fails too, remember the value, so
		// that the next attempt at a group recognises it instead of
		// waiting it out.
		if undoErr := l.undoGroup(ctx, keys, win.ours.value); undoErr != nil {
			l.rememberGroup(keys, win.ours)
			err = errors.Join(err, fmt.Errorf("setnxlock: undo of %q: %w", keys, undoErr))
		}
		return groupWin{}, heldLease{}, fmt.Errorf("setnxlock: acquire %q: %w", keys, err)
	case err != nil:
		return groupWin{}, held, err
	case setnx != nil && !setnx.Val():
		// Every key was missing under the WATCH, yet MSETNX found one: the
		// server does not honour WATCH, and nothing is safe on it.
		return groupWin{}, heldLease{}, fmt.Errorf("%w: MSETNX on %q found a key the watch saw missing", ErrWatchIgnored, keys)
	case getsets != nil:
		if err := l.tookOverGroup(ctx, keys, judged, win.ours, getsets); err != nil {
			return groupWin{}, heldLease{}, err
		}
	}
	return win, heldLease{}, nil
}

// tookOverGroup checks what the takeover's GETSETs replaced, the page's
// check for each key (H2): under the WATCH every key held exactly the
// value the watch read and judged over (or was missing). A key that held
// anything else means the server, or a proxy, ignores WATCH: the GETSET
// may have overwritten a live lease taken in between. As tookOver does
// for one key, it then puts back, as best it can, every value it replaced
// that was not the one judged, deletes our value from the other keys (no
// group was granted), and reports ErrWatchIgnored, which Acquire does not
// retry: without WATCH neither takeover nor release is safe.
func (l *Locker) tookOverGroup(ctx context.Context, keys []string, judged []read, ours stamp, getsets []*redis.StringCmd) error {
	var replaced []string // keys whose value changed under the watch
	var failed []error
	for i, getset := range getsets {
		old, found, err := stringReply(getset)
		if err != nil {
			failed = append(failed, fmt.Errorf("GETSET %q: %w", keys[i], err))
			continue
		}
		if found == judged[i].found && old == judged[i].value {
			continue
		}
		replaced = append(replaced, keys[i])
		if found {
			if err := l.restore(ctx, keys[i], ours.value, old); err != nil {
				failed = append(failed, fmt.Errorf("putting back %q: %w", keys[i], err))
			}
		}
	}
	if len(replaced) == 0 && len(failed) == 0 {
		return nil
	}
	if err := l.undoGroup(ctx, keys, ours.value); err != nil {
		failed = append(failed, fmt.Errorf("undo of %q: %w", keys, err))
	}
	if len(replaced) == 0 {
		return fmt.Errorf("setnxlock: acquire %q: %w", keys, errors.Join(failed...))
	}
	return errors.Join(fmt.Errorf("%w: GETSET on %q replaced values the watch did not read", ErrWatchIgnored, replaced), errors.Join(failed...))
}

// judgeGroup judges each key of the group as judge judges one (H4, H7):
// free reports that every key was missing (MSETNX). It returns an error
// matching ErrNotLockValue when any key holds something that is not a
// lock value, left untouched, else one matching ErrNotAcquired, naming a
// key and its end, while any lease is live, with the instant the last of
// the live leases can be taken over: the group cannot be taken before,
// unless its holders release.
func (l *Locker) judgeGroup(keys []string, reads []read, now time.Time) (free bool, held heldLease, err error) {
	free, held.announced = true, true
	var refused error
	for i, r := range reads {
		if r.err != nil {
			return false, heldLease{}, fmt.Errorf("setnxlock: key %q: %w", keys[i], r.err)
		}
		if !r.found {
			continue
		}
		free = false
		holderExpiry, err := heldUntil(r.value)
		if err != nil {
			return false, heldLease{}, fmt.Errorf("setnxlock: key %q: %w", keys[i], err)
		}
		// H4: over only a skew margin, and our clock's uncertainty, after
		// the end it states.
		takeable := l.takeableAt(holderExpiry)
		if expired(takeable, now) || l.lostGroups.holds(keys[i], r.value, now) {
			// Over, or a group write of ours nobody was granted (H5),
			// which the watched GETSET may overwrite as it would an expired
			// one: of several attempts that recognise it, the WATCH lets
			// one write.
			continue
		}
		l.observe(Event{Kind: EventContended, Key: keys[i], ExpiresAt: takeable})
		held.announced = held.announced && tokenOf(r.value) != ""
		if refused == nil || takeable.After(held.takeableAt) {
			held.takeableAt = takeable
			refused = fmt.Errorf("%w: %q is held until %s", ErrNotAcquired, keys[i], holderExpiry.UTC().Format(time.RFC3339Nano))
		}
	}
	if refused != nil {
		return false, held, refused
	}
	return free, heldLease{}, nil
}

// rememberGroup records a group write whose reply was lost and whose undo
// failed (H5), on each key, where the format lets us recognise it (a bare
// timestamp does not: see remember).
func (l *Locker) rememberGroup(keys []string, write stamp) {
	if !l.cfg.format.tokens() {
		return
	}
	now := l.cfg.clock.Now()
	for _, key := range keys {
		l.lostGroups.remember(key, write, now)
	}
}

// abandonLostGroups deletes, when AcquireMany gives up, the group writes
// on keys whose reply was lost (rememberGroup): nobody will claim them
// now. Each is forgotten first, then deleted only from the keys still
// holding it exactly; bounded whatever ctx says.
func (l *Locker) abandonLostGroups(ctx context.Context, keys []string) {
	var values []string
	for _, key := range keys {
		for _, w := range l.lostGroups.takeAll(key) {
			if !slices.Contains(values, w.value) {
				values = append(values, w.value)
			}
		}
	}
	for _, value := range values {
		_ = l.undoGroup(ctx, keys, value)
	}
}

// groupCounters returns the fence counters of the group's keys, each once
// (a semaphore's permits share one), or nil without fencing.
func (l *Locker) groupCounters(keys []string) []string {
	if !l.cfg.fencing {
		return nil
	}
	counters := make([]string, 0, len(keys))
	for _, key := range keys {
		if counter := l.fenceCounter(key); !slices.Contains(counters, counter) {
			counters = append(counters, counter)
		}
	}
	return counters
}

// groupFencingToken is the group's token: one more than the highest of
// its keys' counters, read under the WATCH, so that it is greater than
// every token drawn before on any key, and every later INCR of any of the
// counters, which the transaction sets to it, exceeds it. A counter that
// is not an integer refuses the group, untouched (H7).
func groupFencingToken(counters []string, reads []read) (int64, error) {
	var highest int64
	for i, r := range reads {
		if r.err != nil {
			return 0, errFenceNotCounter(counters[i])
		}
		if !r.found {
			continue
		}
		n, err := strconv.ParseInt(r.value, 10, 64)
		if err != nil {
			return 0, errFenceNotCounter(counters[i])
		}
		highest = max(highest, n)
	}
	return highest + 1, nil
}

// grantGroup hands out the group won, once enough replicas have every key
// (WithReplicas); otherwise the write is undone, as grantReplicated undoes
// one key's.
func (l *Locker) grantGroup(ctx context.Context, keys []string, win groupWin, acq *acquireCall) (*Lock, error) {
	value := win.ours.value
	err := l.replicate(ctx, ourWrite{keys[0], value}, win.ours.length(), win.ours.expiry, groupWrites(keys[1:], value)...)
	if err != nil {
		if !l.cfg.format.tokens() && (!errors.Is(err, ErrNotReplicated) || errors.Is(err, errNotOurs)) {
			return nil, err // a bare value: only undone where the server that holds it answered
		}
		if undoErr := l.undoGroup(ctx, keys, value); undoErr != nil {
			return nil, errors.Join(err, fmt.Errorf("setnxlock: undo of %q: %w", keys, undoErr))
		}
		return nil, err
	}
	kind := EventAcquired
	if win.recovered {
		kind = EventRecovered
	}
	return l.grantKeys(keys[0], slices.Clone(keys), win.ours, win.fencingToken, kind, acq)
}

// groupWrites is value written at each of keys, for the replicas to
// acknowledge (replicate).
func groupWrites(keys []string, value string) []ourWrite {
	writes := make([]ourWrite, 0, len(keys))
	for _, key := range keys {
		writes = append(writes, ourWrite{key, value})
	}
	return writes
}
