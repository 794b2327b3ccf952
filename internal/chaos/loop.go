package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/setnxlock/setnxlock"
)

// One acquisition loop of a client: acquire, report, the critical section
// under checks of the lease, release, report.

// loop is one acquisition loop's state.
type loop struct {
	cfg    WorkerConfig
	name   string
	res    *resourceConn
	locker *setnxlock.Locker
	clock  SkewedClock
	waits  *waiting
	ev     *eventConn
	rng    *rand.Rand
	seq    int64
	sem    *setnxlock.Semaphore // in a semaphore run, the semaphore whose permits the loop takes
	rw     *setnxlock.RWLock    // in an rwlock run, the read/write lock the loop takes
}

// call is what one acquisition of a loop asks for: its key, or the
// semaphore's or read/write lock's key its call is on record under;
// whether it makes one attempt (try); in an rwlock run whether it takes
// the write lock; in a multi run, the group of keys it locks at once
// (nil: key alone).
type call struct {
	key        string
	try, write bool
	group      []string
}

// runLoop runs one loop until ctx ends, the harness hangs up, or the
// harness tells it to crash.
func runLoop(ctx context.Context, cfg WorkerConfig, name string, locker *setnxlock.Locker, clock SkewedClock, waits *waiting, ev *eventConn) error {
	res, err := dialResource(cfg.Resource, name)
	if err != nil {
		return fmt.Errorf("chaos: %s: resource: %w", name, err)
	}
	defer res.close()
	l := &loop{cfg: cfg, name: name, res: res, locker: locker, clock: clock, waits: waits, ev: ev,
		rng: streamFor(cfg.Seed, "worker/"+name)}
	if name := cfg.Locker.Semaphore; name != "" {
		if l.sem, err = locker.Semaphore(name, len(cfg.Keys)); err != nil {
			return err
		}
	}
	if name := cfg.Locker.RWLock; name != "" {
		if l.rw, err = locker.RWLock(name); err != nil {
			return err
		}
	}
	for ctx.Err() == nil {
		if err := l.once(ctx); err != nil {
			if ctx.Err() != nil && !errors.Is(err, errCrashed) {
				return nil
			}
			return err
		}
	}
	return nil
}

// once is one acquisition and its critical section. It returns an error
// only when the loop must stop.
func (l *loop) once(ctx context.Context) error {
	key := l.cfg.Keys[l.rng.IntN(len(l.cfg.Keys))]
	long := l.rng.Float64() < l.cfg.LongHoldRate
	writes := 1 + l.rng.IntN(3)
	hold := time.Duration((1 + 2*l.rng.Float64()) * float64(l.cfg.TTL)) // a long hold with auto-refresh
	cancelAt := time.Duration(-1)
	if x, at := l.rng.Float64(), l.rng.Float64(); x < l.cfg.CancelRate {
		cancelAt = time.Duration(at * float64(2*l.cfg.TTL))
	}

	c := call{key: key}
	switch {
	case l.sem != nil:
		// Which permit it wins is known once it returns: the call is on
		// record under the semaphore (semaphore.go).
		c.key = semaphoreCallKey(l.sem.Name())
		c.try = l.rng.Float64() < semaphoreTryRate
	case l.rw != nil:
		// Which key it wins, the writer's or a reader's own, is known once
		// it returns: the call is on record under the writer key
		// (rwlock.go).
		c.key = rwCallKey(l.rw.Name())
		c.write, c.try = l.rng.Float64() < rwWriteRate, l.rng.Float64() < rwTryRate
	case l.cfg.Locker.Multi:
		c.try = l.rng.Float64() < multiTryRate
		if l.rng.Float64() < multiGroupRate {
			c.group = l.pickGroup()
			c.key = groupKey(c.group) // on record as the group (multi.go)
		}
	}
	key = c.key

	l.seq++
	seq := strconv.FormatInt(l.seq, 10)
	if _, err := l.res.call("call", seq, key, nanos(time.Now())); err != nil {
		return err
	}
	lock, trace, err := l.acquire(ctx, c, cancelAt)
	doubt := trace.doubt.Load()
	if l.sem != nil || c.group != nil {
		// Its writes went to several keys: on record, the keys those in
		// doubt named (semaphoreCalls, perKey), and a semaphore's
		// acquisition in doubt only when one named the permit it won.
		if _, err := l.res.call("doubts", seq, trace.doubtList()); err != nil {
			return err
		}
		if permit, ok := lock.(heldLock); ok && err == nil && l.sem != nil {
			doubt = trace.doubtOn(permit.Key())
		}
	}
	if err != nil {
		// On record even when the client is ending (a sibling loop told to
		// crash): a write in doubt may still hold the key.
		if _, err := l.res.call("fail", seq, key, nanos(time.Now()), strconv.FormatBool(doubt), oneLine(err)); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A service whose Acquire failed (OOM, say) tries again a little later.
		return sleep(ctx, time.Duration(l.rng.Float64()*float64(l.cfg.MaxBackoff)))
	}
	granted := time.Now()
	if held, ok := lock.(heldLock); ok && (l.sem != nil || l.rw != nil) {
		key = held.Key() // the permit, or the writer's or a reader's key, it won
	}
	token := strconv.FormatInt(lock.FencingToken(), 10)
	if _, err := l.res.call("acq", seq, key, token, nanos(trace.sentAt(granted)), nanos(granted), l.wall(lock.ExpiresAt()), strconv.FormatBool(doubt),
		strconv.FormatInt(lock.ExpiresAt().UnixMilli(), 10)); err != nil {
		return err
	}

	// The critical section: each write to the resource only after a check
	// that the lease is live by our own clock, as the README asks of a
	// holder, and a last check on the way out. A write still in flight
	// when the lease ends is what fencing is for. A holder that works
	// until told (UntilLost) still reports each check, but goes on until
	// its Lock tells it of a loss, as code under Lock.Context does.
	var loss *lossWatch
	if l.cfg.Locker.UntilLost {
		loss = watchLoss(lock)
		defer loss.stop()
	}
	for i := 0; ; i++ {
		now, ends := l.clock.Now(), lock.ExpiresAt()
		live := now.Before(ends)
		more := i < writes || (long && (!l.cfg.Locker.AutoRefresh || time.Since(granted) < hold))
		over := !live
		if loss != nil {
			over = loss.told()
		}
		if over || !more {
			// On record before the release is sent, so before anyone else
			// can be granted the key: a run that stops mid-release cannot
			// lose it.
			told, toldEnd := "0", "0"
			if loss != nil && loss.told() {
				told, toldEnd = nanos(loss.at), l.wall(loss.leaseEnd)
			}
			if _, err := l.res.call("done", seq, l.wall(now), strconv.FormatBool(live), l.wall(ends), told, toldEnd); err != nil {
				return err
			}
			break
		}
		reply, err := l.res.call("op", seq, key, token, l.wall(now), l.wall(ends))
		switch {
		case err != nil:
			return err
		case reply == replyCrash:
			return errCrashed // the lock is never released
		case reply == replyStale:
			writes = i // fenced out: a later holder has written; leave after the next check
			long = false
		case long && loss != nil:
			loss.sleep(l.cfg.TTL / 8)
		case long:
			time.Sleep(l.cfg.TTL / 8)
		}
	}
	outcome := l.release(ctx, lock)
	_, err = l.res.call("rel", seq, outcome, nanos(time.Now()))
	return err
}

// wall turns an instant of our clock into a wall-clock instant, as
// protocol nanoseconds.
func (l *loop) wall(t time.Time) string { return nanos(t.Add(-l.cfg.Offset)) }

// acquire calls Acquire (in an election run, Campaign for the election
// whose lock is key; in a semaphore run, the semaphore's Acquire, or its
// TryAcquire when try is set; in an rwlock run, RLock, TryRLock, Lock or
// TryLock; for a group, AcquireMany or TryAcquireMany; TryAcquire for a
// single key that tries, in a multi run) with a context that ends after
// 20 leases, or at cancelAt when that is not negative, or when the
// harness's announcement of a release of key (of any permit, in a
// semaphore run; of any key of the group) makes cancelOnRelease end it.
// The trace says what the call sent.
func (l *loop) acquire(ctx context.Context, c call, cancelAt time.Duration) (holding, *callTrace, error) {
	key, try := c.key, c.try
	limit := 20 * l.cfg.TTL
	if cancelAt >= 0 {
		limit = cancelAt
		l.ev.fault(FaultCancel)
	}
	actx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	trace := &callTrace{}
	actx = context.WithValue(actx, callKey{}, trace)
	p := &pendingAcquire{cancel: cancel}
	waitsOn := []string{key}
	switch {
	case l.sem != nil:
		waitsOn = l.cfg.Keys // it waits on every permit at once
	case c.group != nil:
		waitsOn = c.group
	}
	for _, k := range waitsOn {
		l.waits.add(k, p)
		defer l.waits.remove(k, p)
	}
	if l.sem != nil {
		take := l.sem.Acquire
		if try {
			take = l.sem.TryAcquire
		}
		lock, err := take(actx)
		if err != nil {
			return nil, trace, err
		}
		return heldLock{lock}, trace, nil
	}
	if l.rw != nil || c.group != nil || (try && l.cfg.Locker.Multi) {
		lock, err := l.take(actx, c)
		if err != nil {
			return nil, trace, err
		}
		return heldLock{lock}, trace, nil
	}
	if l.cfg.Locker.Election {
		// ElectionKey(name) is key: key carries name as its hash tag.
		lead, err := l.locker.Campaign(actx, strings.TrimSuffix(key, ".election"), l.name)
		if campaignInDoubt(trace, err) {
			trace.doubt.Store(true)
		}
		if err != nil {
			return nil, trace, err
		}
		return heldLeadership{lead}, trace, nil
	}
	lock, err := l.locker.Acquire(actx, key)
	if err != nil {
		return nil, trace, err
	}
	return heldLock{lock}, trace, nil
}

// take makes the call of an rwlock run, or of a multi run that locks a
// group or tries a single key once.
func (l *loop) take(ctx context.Context, c call) (*setnxlock.Lock, error) {
	switch {
	case l.rw != nil && c.write && c.try:
		return l.rw.TryLock(ctx)
	case l.rw != nil && c.write:
		return l.rw.Lock(ctx)
	case l.rw != nil && c.try:
		return l.rw.TryRLock(ctx)
	case l.rw != nil:
		return l.rw.RLock(ctx)
	case c.group != nil && c.try:
		return l.locker.TryAcquireMany(ctx, c.group...)
	case c.group != nil:
		return l.locker.AcquireMany(ctx, c.group...)
	}
	return l.locker.TryAcquire(ctx, c.key)
}

// pickGroup draws 2 or 3 of the loop's keys in a random order: groups of
// other loops take the same keys in other orders.
func (l *loop) pickGroup() []string {
	keys := slices.Clone(l.cfg.Keys)
	l.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys[:2+l.rng.IntN(2)]
}

// campaignInDoubt reports whether a Campaign call that returned err may
// have left a lease on its key that nobody reports. A lock Campaign won
// and gave up (its record not published: an EXECABORT under OOM, a
// context that ended while publishing, a lease that ran out first) is
// resigned on a best-effort basis: a Resign refused or cut off leaves that
// lease on the key to its end, unknown to the history (seen: free waits of
// 292ms and, with the context ended, 321ms). So a Campaign that fails
// after a win, or wins after giving one up, is a write in doubt. A failure
// of another kind than ErrNotAcquired comes only after a win, whether or
// not the trace saw it.
func campaignInDoubt(trace *callTrace, err error) bool {
	wins := trace.wins.Load()
	return wins > 1 || (err != nil && (wins > 0 || !errors.Is(err, setnxlock.ErrNotAcquired)))
}

// release releases the lock, trying again after network errors as the
// README allows, and names the outcome for the report.
func (l *loop) release(ctx context.Context, lock holding) string {
	for range 3 {
		rctx, cancel := context.WithTimeout(ctx, 5*l.cfg.ReadTimeout)
		outcome, retry := lock.release(rctx)
		cancel()
		if !retry {
			return outcome
		}
	}
	return OutcomeError
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
