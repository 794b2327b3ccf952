package chaos

import (
	"sync"
	"time"
)

// The recorder: every report of the clients and every decision of the
// resource, with the harness's clock, gathered into the History that the
// checkers read.

// recorder holds the history as it is recorded. It is safe for concurrent
// use.
type recorder struct {
	mu           sync.Mutex
	stopped      bool
	acqs         map[AcqID]*Acquisition
	order        []AcqID             // acquisitions in the order they were reported
	pending      map[AcqID]*Call     // Acquire calls in progress
	open         map[AcqID]time.Time // critical sections entered and not yet left, by entry
	calls        []Call              // Acquire calls that returned no lock
	ops          []Op
	maxToken     map[string]int64
	down         []Interval
	stalls       []Interval     // the harness's own scheduling stalls (stalls.go)
	serverStalls []Interval     // the server's, as the key sampler saw them (stalls.go)
	stale        int            // writes refused
	fails        []string       // Acquire errors
	releases     map[string]int // Release outcomes
	faults       map[string]int // faults, by kind
	faultLog     []FaultAt
	states       []KeyState
	doubts       []Doubt              // claims a fault may have landed unknown to their client (claimdoubts.go)
	dead         map[string]time.Time // processes recorded killed, and when

	// onAcquired is called, without mu, with the number of acquisitions
	// recorded so far.
	onAcquired func(n int)
}

func newRecorder(onAcquired func(int)) *recorder {
	return &recorder{acqs: map[AcqID]*Acquisition{}, pending: map[AcqID]*Call{}, open: map[AcqID]time.Time{}, dead: map[string]time.Time{}, maxToken: map[string]int64{},
		releases: map[string]int{}, faults: map[string]int{}, onAcquired: onAcquired}
}

// called records the start of an Acquire call.
func (r *recorder) called(id AcqID, key string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.pending[id] = &Call{Client: id.Client, Seq: id.Seq, Key: key, Start: at}
	}
}

func (r *recorder) acquired(a Acquisition) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	id := a.ID()
	if c := r.pending[id]; c != nil {
		a.Called, a.DoubtOn = c.Start, c.DoubtOn
		delete(r.pending, id)
	}
	if _, dup := r.acqs[id]; !dup {
		r.acqs[id] = &a
		r.order = append(r.order, id)
	}
	n := len(r.order)
	r.mu.Unlock()
	r.onAcquired(n)
}

// doubtedOn records the keys a call's writes in doubt named, reported
// just before its acquisition or failure.
func (r *recorder) doubtedOn(id AcqID, keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.pending[id]; c != nil && !r.stopped {
		c.DoubtOn = keys
	}
}

// failed records an Acquire call that returned an error.
func (r *recorder) failed(id AcqID, end time.Time, doubt bool, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.pending[id]
	if r.stopped || c == nil {
		return
	}
	delete(r.pending, id)
	c.End, c.InDoubt, c.Err = end, doubt, text
	r.calls = append(r.calls, *c)
	r.fails = append(r.fails, id.Client+": "+text)
}

// killed ends the pending Acquire calls and open sections of a process's
// loops: the process was killed at the given instant. A section whose
// entry the resource reads after that (sent just before the kill) is
// ended as it opens (checked).
func (r *recorder) killed(process string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	for id, c := range r.pending {
		if processOf(id.Client) == process {
			delete(r.pending, id)
			c.End, c.Killed = at, true
			r.calls = append(r.calls, *c)
		}
	}
	r.dead[process] = at
	for id := range r.open {
		if processOf(id.Client) == process {
			delete(r.open, id)
			r.acqs[id].Killed = at
		}
	}
}

// inSection returns the loops inside a critical section they entered
// before the given instant, in a stable order.
func (r *recorder) inSection(before time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for id, entered := range r.open {
		if entered.Before(before) {
			seen[id.Client] = true
		}
	}
	return sortedKeys(seen)
}

// waiting returns the processes with an Acquire call in progress since
// before the given instant, in a stable order.
func (r *recorder) waiting(before time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for id, c := range r.pending {
		if c.Start.Before(before) {
			seen[processOf(id.Client)] = true
		}
	}
	return sortedKeys(seen)
}

// checked records a check of the lease by its holder: live or not, and
// the end of the lease it saw.
func (r *recorder) checked(id AcqID, at time.Time, live bool, leaseEnd time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.acqs[id]
	if a == nil || r.stopped {
		return
	}
	a.LeaseEnd = leaseEnd
	switch {
	case !live && !a.Entered.IsZero():
		a.Overran = true
	case live && a.Entered.IsZero():
		a.Entered, a.LastLive = at, at
		r.open[id] = at
		if killed, dead := r.dead[processOf(id.Client)]; dead { // its report came in after its process's end
			a.Killed = killed
			delete(r.open, id)
		}
	case live:
		a.LastLive = at
	}
}

// write is the resource's decision on one write: accepted unless a higher
// token has been accepted for the key, or without a token (0).
func (r *recorder) write(id AcqID, key string, token int64) (accepted, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false, false
	}
	// A write without a token (0) is an unfenced holder's, beside fenced
	// ones in the rwlock mode: the fence has nothing to judge it by.
	accepted = token == 0 || token >= r.maxToken[key]
	if !accepted {
		r.stale++
	}
	r.maxToken[key] = max(r.maxToken[key], token)
	r.ops = append(r.ops, Op{AcqID: id, Key: key, Token: token, At: time.Now(), Accepted: accepted})
	return accepted, true
}

// done records when a holder's critical section ended: it reports this
// before it sends its release. It returns the key.
func (r *recorder) done(id AcqID, at time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.acqs[id]
	if a == nil || r.stopped {
		return ""
	}
	a.Released = at
	delete(r.open, id)
	return a.Key
}

// told records when a holder that works until told learned of its loss,
// and the end of the lease its Lock stated then.
func (r *recorder) told(id AcqID, at, leaseEnd time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.acqs[id]; a != nil && !r.stopped {
		a.Told, a.ToldEnd = at, leaseEnd
	}
}

// released records the outcome of a release whose done is on record.
func (r *recorder) released(id AcqID, outcome string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.acqs[id]; a != nil && !r.stopped {
		a.Outcome, a.ReleaseReturned = outcome, at
		r.releases[outcome]++
	}
}

// crashed marks the acquisition whose holder the harness is killing.
func (r *recorder) crashed(id AcqID, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.acqs[id]; a != nil && !r.stopped {
		a.Crashed = at
		delete(r.open, id)
	}
}

// fault records a fault: one the harness injected, or one a client
// injected into itself and reported.
func (r *recorder) fault(kind, client string) { r.faultFor(kind, client, 0) }

// faultFor records a fault that lasts d (a pause).
func (r *recorder) faultFor(kind, client string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.faults[kind]++
		f := FaultAt{At: time.Now(), Kind: kind, Client: client}
		if d > 0 {
			f.Until = f.At.Add(d)
		}
		r.faultLog = append(r.faultLog, f)
	}
}

// keyState records what the server held for a key.
func (r *recorder) keyState(s KeyState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.states = append(r.states, s)
	}
}

func (r *recorder) serverDown(i Interval) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = append(r.down, i)
}

func (r *recorder) stalled(i Interval) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.stalls = append(r.stalls, i)
	}
}

func (r *recorder) serverStalled(i Interval) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.serverStalls = append(r.serverStalls, i)
	}
}

// stop ends the recording: later reports are ignored, since the run's end
// cuts them short.
func (r *recorder) stop() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	return time.Now()
}

// history returns what was recorded, acquisitions in the order reported.
func (r *recorder) history(mode string, end time.Time) History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := History{Mode: mode, End: end, Ops: append([]Op(nil), r.ops...), Downtime: append([]Interval(nil), r.down...),
		Stalls: append([]Interval(nil), r.stalls...), ServerStalls: append([]Interval(nil), r.serverStalls...),
		Calls: append([]Call(nil), r.calls...), Faults: append([]FaultAt(nil), r.faultLog...),
		Keys: append([]KeyState(nil), r.states...), Doubts: append([]Doubt(nil), r.doubts...)}
	for _, id := range r.order {
		h.Acquisitions = append(h.Acquisitions, *r.acqs[id])
	}
	return h
}
