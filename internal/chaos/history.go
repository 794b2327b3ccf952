package chaos

import "time"

// History is everything a run recorded. Times are wall-clock instants of
// the one machine every client runs on, so instants taken in different
// processes compare.
type History struct {
	Acquisitions []Acquisition
	Ops          []Op       // in the order the resource decided them
	Downtime     []Interval // when the redis-server was down (restarts)
	End          time.Time  // when the run stopped its clients
}

// Acquisition is one lock won by one client.
type Acquisition struct {
	Client string // the client incarnation, e.g. "g3" or "p1.2" (slot 1, third process)
	Seq    int64  // the client's acquisition number; (Client, Seq) is unique
	Key    string
	Token  int64 // the fencing token

	// Sent is when the client sent the transaction that won the lock, and
	// Granted is when Acquire returned it: the win happened in between.
	Sent, Granted time.Time
	// LeaseEnd is the end of the lease by the client's own clock
	// (Lock.ExpiresAt), as a wall-clock instant: the clock's skew removed.
	LeaseEnd time.Time
	// Released is when the client ended its critical section, just before
	// it called Release; zero if it never did.
	Released time.Time
	// Crashed is when the harness killed the client (SIGKILL, or a
	// goroutine told to abandon its lock) while it held the lock; zero
	// otherwise.
	Crashed time.Time
}

// ID names the acquisition in reports.
func (a Acquisition) ID() AcqID { return AcqID{Client: a.Client, Seq: a.Seq} }

// Held is the interval in which the client held the lock: from the grant
// until its lease ended or it called Release, whichever came first. The
// lease may have begun before the grant, but the client could not act on
// it earlier.
func (a Acquisition) Held() Interval {
	end := a.LeaseEnd
	if !a.Released.IsZero() && a.Released.Before(end) {
		end = a.Released
	}
	return Interval{From: a.Granted, To: end}
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
