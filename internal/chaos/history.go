package chaos

import "time"

// History is everything a run recorded. Times are wall-clock instants of
// the one machine every client runs on, so instants taken in different
// processes compare: the machine's clock is the arbiter of real time.
type History struct {
	Mode         string
	Acquisitions []Acquisition
	Calls        []Call     // Acquire calls that did not return a lock: failed, or cut short by a kill
	Ops          []Op       // in the order the resource decided them
	Downtime     []Interval // when a redis-server was down (restarts)
	Stalls       []Interval `json:",omitempty"` // when the harness itself could not run: the machine was overloaded (stalls.go)
	ServerStalls []Interval `json:",omitempty"` // when the server answered the key sampler late: it served nobody (stalls.go)
	Faults       []FaultAt  // every fault but the network's, as the harness learned of it
	Keys         []KeyState // what the server held, sampled (sampler.go); empty on a Cluster
	Doubts       []Doubt    `json:",omitempty"` // claims after a handoff that a fault may have landed unknown to their client (claimdoubts.go)
	End          time.Time  // when the run stopped its clients
}

// FaultAt is one fault injected at an instant: its kind (see Faults), the
// client it hit, if any, and for a process stopped with SIGSTOP when it
// was continued.
type FaultAt struct {
	At     time.Time
	Kind   string
	Client string    `json:",omitempty"`
	Until  time.Time `json:",omitempty"`
}

// Acquisition is one lock won by one client, and the critical section it
// ran under it.
//
// The section is a sequence of checks by the holder's own clock, each
// asking whether the lease is still live (now before Lock.ExpiresAt): one
// on entry, one before each write to the resource, one on exit. The
// section counts, for mutual exclusion, from the first check that found
// the lease live (Entered) to the last one (LastLive). A holder whose
// check found the lease over after it had entered stalled past its lease
// (H8): it is counted in Overran, and only its live part counts.
type Acquisition struct {
	Client string // the client incarnation and loop, e.g. "g3.0/1" or "p1.2/0"
	Seq    int64  // the loop's acquisition number; (Client, Seq) is unique
	Key    string
	Token  int64 // the fencing token, 0 without fencing

	// Called is when Acquire was called. Sent is when the client last
	// sent a command that can win a lock before Acquire returned, and
	// Granted is when Acquire returned.
	Called, Sent, Granted time.Time
	// Expiry is the lease's end as the value at the key states it, in
	// Unix milliseconds by the clock that wrote it (Lock.ExpiresAt when
	// Acquire returned).
	Expiry int64
	// LeaseEnd is the end of the lease by the client's own clock
	// (Lock.ExpiresAt at its last check), as a wall-clock instant: the
	// clock's offset removed.
	LeaseEnd time.Time

	// InDoubt: a write of its Acquire failed without a reply before it
	// won (see Call.InDoubt); the key may have been held by that write.
	// In a semaphore run, only a write that named this key.
	InDoubt bool
	// DoubtOn, in a semaphore run, lists the permit keys its call's
	// writes in doubt named ([doubtAny]: any key; empty: none): those its
	// call may have left a lease on (semaphoreCalls); nil elsewhere.
	DoubtOn []string

	Entered  time.Time // the first check that found the lease live; zero if none did
	LastLive time.Time // the last check that found the lease live
	Overran  bool      // a check after entry found the lease over (H8)

	// Told is when the holder learned from its Lock (Done closed) that
	// the lock was lost, while it worked in its section; zero if it was
	// not told before it left. ToldEnd is the end of the lease its Lock
	// stated then (ExpiresAt), by its clock, as a wall-clock instant.
	// Recorded by holders that work until told (LockerConfig.UntilLost).
	Told, ToldEnd time.Time `json:",omitempty"`

	// Released is when the client ended its critical section, just before
	// it called Release; zero if it never did. ReleaseReturned is when
	// Release returned, with Outcome: released, not-held or error.
	Released, ReleaseReturned time.Time
	Outcome                   string
	// Crashed is when the harness killed the client (SIGKILL, or a
	// goroutine told to abandon its lock) while it held the lock or
	// released it; zero otherwise.
	Crashed time.Time
	// Killed is when the holder's process ended while it was inside its
	// section by a fault aimed at another of its loops (waiter-kill); the
	// recovery check does not look at it.
	Killed time.Time `json:",omitempty"`
}

// ID names the acquisition in reports.
func (a Acquisition) ID() AcqID { return AcqID{Client: a.Client, Seq: a.Seq} }

// Section is the interval the acquisition counts as a critical section
// for mutual exclusion, and whether there is one at all. A holder told
// of its loss (Told) holds no longer than that, whatever its last check
// found: its Lock has reported its end (in the heard mode, a claim after
// a handoff that failed; a lease that ran out).
func (a Acquisition) Section() (Interval, bool) {
	if a.Entered.IsZero() || (!a.Told.IsZero() && !a.Told.After(a.Entered)) {
		return Interval{}, false
	}
	to := a.LastLive
	if !a.Told.IsZero() {
		to = earlier(to, a.Told)
	}
	return Interval{From: a.Entered, To: to}, true
}

// freedBy is the latest instant at which the key was certainly free of
// this holder: when its Release returned, if it released a live lease;
// otherwise when its lease ended by its own clock plus wait, the most any
// other client's clock may lag behind (skew within the margin).
func (a Acquisition) freedBy(wait time.Duration) time.Time {
	if a.Outcome == OutcomeReleased && a.ReleaseReturned.Before(a.LeaseEnd) {
		return a.ReleaseReturned
	}
	return a.LeaseEnd.Add(wait)
}

// Release outcomes.
const (
	OutcomeReleased = "released"
	OutcomeNotHeld  = "not-held"
	OutcomeError    = "error"
)

// Call is an Acquire call that returned no lock: its context ended, it
// failed, or its process was killed while it waited.
type Call struct {
	Client     string
	Seq        int64
	Key        string
	Start, End time.Time // End: when it returned, or when its process was killed
	// InDoubt: one of its commands that can write the key failed without
	// a reply (a lost reply, a cut connection, its context ending in
	// flight): the server may hold a lease nobody knows it owns until that
	// lease ends (H5).
	InDoubt bool
	// DoubtOn, in a semaphore run, lists the keys its writes in doubt
	// named, as Acquisition.DoubtOn does; nil: any, if InDoubt.
	DoubtOn []string
	Killed  bool   // its process was killed while it waited
	Err     string // its error, if it returned one
}

// AcqID identifies an acquisition.
type AcqID struct {
	Client string
	Seq    int64
}

// Op is one write to the protected resource under a lock.
type Op struct {
	AcqID
	Key      string
	Token    int64
	At       time.Time // when the resource decided
	Accepted bool      // false: the token was stale, the write was refused
}

// Interval is a span of wall-clock time.
type Interval struct{ From, To time.Time }

// overlaps reports whether two intervals share more than an endpoint.
func (i Interval) overlaps(j Interval) bool {
	return i.From.Before(j.To) && j.From.Before(i.To)
}

// downtime is how much of [from, to] the server spent down.
func downtime(down []Interval, from, to time.Time) time.Duration {
	var total time.Duration
	for _, d := range down {
		start, end := later(d.From, from), earlier(d.To, to)
		if start.Before(end) {
			total += end.Sub(start)
		}
	}
	return total
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
