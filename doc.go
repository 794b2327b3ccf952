// Package setnxlock implements Redis locks with the classic algorithm of the
// Redis SETNX command page, done as safely as that algorithm allows.
//
// Make one Locker per client and share it; take a lock, defer its release,
// and do the work well inside the lease:
//
//	locker, err := setnxlock.New(client, setnxlock.WithTTL(30*time.Second))
//	if err != nil {
//		return err // ErrInvalidArgument: a nil client, a TTL below 1ms, ...
//	}
//	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second) // how long to wait for the lock
//	defer cancel()
//	lock, err := locker.Acquire(waitCtx, "lock.nightly-report")
//	if errors.Is(err, setnxlock.ErrNotAcquired) {
//		return err // held by someone else until waitCtx ended (matches context.DeadlineExceeded too)
//	} else if err != nil {
//		return err // ErrNotLockValue (the key holds something else), ErrInvalidArgument, ...
//	}
//	defer func() {
//		if err := lock.Release(context.Background()); errors.Is(err, setnxlock.ErrNotHeld) {
//			log.Print("the lease ran out before the release: someone else may have run too")
//		}
//	}()
//	return work(lock.Context(ctx)) // cancelled if the lock is lost before the work ends
//
// TryAcquire makes one attempt and returns ErrNotAcquired at once when the
// key is held. A lock is a lease: Refresh moves its end, WithAutoRefresh
// renews it in the background, and Done, Err and Context tell its loss.
// WithFencing adds a token that strictly increases from holder to holder,
// for the protected resource to reject a stalled holder's late writes.
// Campaign and Lead elect a leader on the same lock.
//
// A lock is a key whose value states when the holder's lease ends:
//
//  1. SETNX key <expiry>: 1 means the lock is ours.
//  2. Otherwise GET key. A live expiry means someone else holds it.
//  3. An expired one means its holder crashed: GETSET key <new expiry>,
//     inside WATCH/MULTI/EXEC on the expired value, so that of the clients
//     racing for it only the winner's GETSET runs (where scripts run, the
//     same compare-and-set is takeover.lua, one round trip).
//
// Release deletes the key only while it still holds our value, atomically.
// Nothing newer than SETNX, GET, GETSET, DEL and WATCH/MULTI/EXEC is needed;
// scripts, SET NX PX and pub/sub are used where allowed, never for
// correctness. Values we write are "<expiry Unix ms>:<owner token>"; every
// classic format is read (Unix seconds or milliseconds, integer or decimal).
//
// # The map
//
// The Locker (locker.go: New, TTL, Close) holds the client, the options
// (options.go) and what the server allows. Acquiring: Acquire (acquire.go)
// repeats one attempt, the page's three
// steps plus recognising our own writes whose reply was lost (pending.go),
// and waits in between (wait.go). The takeover of an expired lease is
// deadlock.go (its script, takeoverscript.go); a won lock is handed out by grant.go; the values an attempt
// writes are stamps (stamp.go, with the safety net's length); the
// transaction core every guarded write runs in, and the owned-delete, is
// transaction.go.
//
// The three paths (path.go), one interface, chosen in one place (onPath):
//   - scripts (scripts.go, the Lua in lua/, one job per file; the common
//     path sends them from one argument slice, scriptcall.go): one round
//     trip per attempt and per release; the default;
//   - commands (commands.go): SET NX PX, GET, a watched delete;
//     WithoutScripts, or after scripts are refused;
//   - classic (commands.go): SETNX, then PEXPIRE in a transaction watched
//     on our value (commands.go, H6, H10); WithClassicCommands, or a server
//     without SET's options.
//
// The three ways to wait (wait.go):
//   - the queue (protocol.go states its steps, encodings and invariants
//     once; queue.go, handoff.go, route.go; the transports scriptqueue.go
//     and, without scripts, commandqueue.go and commandhandon.go):
//     a release hands the key to the first waiter in line, which holds it
//     as soon as it hears so and claims it in the background (heard.go), once that waiter has waited WithStarvationThreshold, and until
//     then frees the key and wakes it (adaptive barging); the default on
//     one server;
//   - wake-ups (wakeup.go): a release is announced on the key's channel,
//     by a Locker that hands over only to waits listed in the key's queue
//     (wakelisten.go);
//   - polling with backoff (retry.go), capped at the holder's lease.
//
// Every way wakes at the holder's lease's end: a queued wait at that
// instant by the Locker's clock (leasewake.go), the others a jitter after.
//
// The Lock (lock.go) owns its values and talks to Redis in its turn
// (turn.go), never past its lease's end; its lease (lease.go) says when it
// ends; the lease keeper (keeper.go) renews it until Release or Orphan,
// and watches it run out; refresh.go moves it, and lifecycle.go reports
// how the Lock's life ended. Do (do.go) runs work under a Lock: acquired,
// kept renewed, released whatever the work does. What the server and user allow is
// capabilities.go, read from replies by their error code (replies.go).
// Keys and channel names: keys.go. Values: value.go (reading), format.go
// (writing), identity.go (who holds a lock, written after the token).
// Also: clock.go, serverclock.go, clockwait.go (timers that follow their
// clock), belief.go (a lease's end as we believe it, and when one is
// over), fencing.go, observer.go (events), calls.go (a CallObserver's
// calls, for spans), options.go, errors.go; status.go reads a key from the
// outside (Status) and breaks it (ForceRelease), scan.go lists the keys
// that match a pattern (ScanStatus); replicas.go makes lease writes wait for replicas
// (WithReplicas). The release's owner check (H3) is ownercheck.go;
// ownercheck_off.go, built only with the tag setnxlock_no_owner_check,
// breaks it on purpose for the fault-injection harness's broken runs.
//
// A semaphore of N permits (semaphore.go) is N lock keys, each permit an
// ordinary Lock: at most one lease per permit key, so at most N holders
// while every client agrees on N, which the first acquisition records in
// Redis and every acquisition checks (semaphorecount.go); a waiting
// Acquire stands once in the semaphore's one queue, which every permit's
// release hands on to (semwait.go; on a Locker that does not queue it
// waits on every permit at once, as Acquire waits on a key, and keeps
// the first it gets). semaphorestatus.go reads its holders and waiters.
//
// Several keys at once (acquiremany.go: TryAcquireMany) are one Lock on
// all of them or none: one watched transaction writes one value, one lease
// and, with fencing, one token to every key (MSETNX when all are free,
// else the watched takeover of the expired ones); on a Cluster the keys
// must share a slot (keyslot.go). The Lock's round trips branch for a
// group in group.go (release, all-or-nothing renewal, undo); AcquireMany
// waits on every key's wake-ups, never queued (groupwait.go).
// A read/write lock (rwlock.go) is a writer key and a lock key per
// reader: a writer holds WriterKey(name), taken as any lock (its queue,
// handoff, takeover, fencing), then waits until no reader listed at
// ReadersKey(name) holds a live lease (rwreaders.go, which deletes
// expired reader keys by their exact value); a reader is admitted by one
// transaction watched on the writer key and its queue (rwadmit.go), or,
// refused, waits in the writer key's queue with the writers and converts
// once it holds the key, so that readers and writers are served in one
// arrival order and no reader passes a waiting writer; rwstatus.go reads
// its writer, queue and readers (Status).
//
// Leader election rides on the lock: a candidate leads while it holds the
// lock on ElectionKey(name), taken with a fencing token (its term) and
// renewed in the background, and publishes who leads in a record at
// LeaderKey(name) written only while the lock is its own (election.go:
// Campaign, Leadership, Resign; election_record.go: the record, published
// and unpublished); election_read.go reads who leads (Leader),
// election_observe.go follows an election (Observe) and election_lead.go
// is the service idiom (Lead).
//
// # Hazards
//
// The comments name the hazard they handle:
//
//	H1  DEL-then-SETNX lets two clients in: expired locks are taken only by the watched GETSET (deadlock.go)
//	H2  the GETSET loser overwrites the winner: its GETSET never runs (deadlock.go)
//	H3  release or refresh after our lease ended: compare-and-delete/-set on our value (lock.go, refresh.go, lua/owned.lua)
//	H4  clocks disagree: one Clock per Locker, ServerClock, WithSkewMargin, its Uncertainty (clock.go, serverclock.go, belief.go, acquire.go)
//	H5  a reply is lost after the write applied: our writes are recognised (pending.go, protocol.go, lua/release.lua)
//	H6  keys left forever: a relative PEXPIRE a grace past every lease (stamp.go, commands.go)
//	H7  the key holds no lock value: ErrNotLockValue, the key untouched (value.go)
//	H8  the holder stalls past its lease: Done, Err, Context, fencing tokens (lifecycle.go, fencing.go)
//	H9  a restart without persistence, or a failover, loses the key: WithReplicas waits for replicas (replicas.go); the rest is documented (docs/HOW-IT-WORKS.md)
//	H10 a request arrives late, after later writes: every unconditional write only moves a lease forward (protocol.go, lua/queued.lua)
//	H11 the holder is cut off from Redis: the loss is signalled at the lease's end, whatever is in flight (turn.go, keeper.go, lifecycle.go, lease.go)
//
// Safety rests on clocks: every process locking the same key must agree on
// the time to within the skew margin, because an expired lease is judged by
// the reader's clock. A holder that pauses past its lease (GC, swap) may
// find its lock taken over; keep critical sections well inside the TTL.
package setnxlock
