package chaos

import (
	"bufio"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The protected resource and the recorder: clients report their Acquire
// calls, acquisitions, lease checks and releases here and write to the
// resource under their fencing tokens. The resource is the fenced store of
// the fencing-token argument: per key it remembers the highest token it
// has accepted and refuses any lower one (without fencing every token is
// 0 and every write is accepted). Every report and every decision is
// recorded with the harness's clock.

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

	// onAcquired is called, without mu, with the number of acquisitions
	// recorded so far.
	onAcquired func(n int)
}

func newRecorder(onAcquired func(int)) *recorder {
	return &recorder{acqs: map[AcqID]*Acquisition{}, pending: map[AcqID]*Call{}, open: map[AcqID]time.Time{}, maxToken: map[string]int64{},
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
		a.Called = c.Start
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

// killed ends the pending Acquire calls of a process's loops: the process
// was killed at the given instant.
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
	case live:
		a.LastLive = at
	}
}

// write is the resource's decision on one write: accepted unless a higher
// token has been accepted for the key.
func (r *recorder) write(id AcqID, key string, token int64) (accepted, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false, false
	}
	accepted = token >= r.maxToken[key]
	if accepted {
		r.maxToken[key] = token
	} else {
		r.stale++
	}
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
		Keys: append([]KeyState(nil), r.states...)}
	for _, id := range r.order {
		h.Acquisitions = append(h.Acquisitions, *r.acqs[id])
	}
	return h
}

// processOf is the client incarnation a loop belongs to: "p1.2" for
// "p1.2/0".
func processOf(loop string) string {
	process, _, _ := strings.Cut(loop, "/")
	return process
}

// slotName is the client slot a loop or incarnation belongs to, every
// incarnation alike: "p1" for "p1.2/0". Each slot of the partition mode
// reaches Redis through a proxy of its own.
func slotName(client string) string {
	slot, _, _ := strings.Cut(client, ".")
	return slot
}

// action is what the harness does to a client at one of its writes.
type action int

const (
	actNone  action = iota
	actCrash        // kill the process with SIGKILL, or tell the goroutine to abandon its lock
	actPause        // stop the process (SIGSTOP) or stall the goroutine past its lease, then let the write through
)

// faultPlan decides what happens to one client: at each write, right
// after each grant, and at each release.
type faultPlan interface {
	next() (action, time.Duration)
	afterGrant() (pause bool, d time.Duration)
	atRelease() (kill bool, delay time.Duration)
}

// clientHooks is what the resource needs from the harness for one client.
type clientHooks struct {
	plan  faultPlan
	kill  func(kind string) bool // SIGKILL the process; false for a goroutine client, told to crash instead
	pause func(kind string, d time.Duration, stop <-chan struct{})
}

// announcer sends the clients' events connections the releases of keys.
type announcer struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (a *announcer) add(c net.Conn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conns == nil {
		a.conns = map[net.Conn]struct{}{}
	}
	a.conns[c] = struct{}{}
}

func (a *announcer) remove(c net.Conn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.conns, c)
}

// released tells every client that a holder of key is releasing it. A
// write that would block (a stopped client) is dropped.
func (a *announcer) released(key string) {
	line := []byte("released " + key + "\n")
	a.mu.Lock()
	defer a.mu.Unlock()
	for c := range a.conns {
		_ = c.SetWriteDeadline(time.Now().Add(time.Millisecond))
		_, _ = c.Write(line)
	}
}

// resource answers the clients.
type resource struct {
	rec   *recorder
	hooks func(client string) clientHooks
	stop  <-chan struct{}
	track func(net.Conn) bool
	ann   announcer
}

// serve answers clients on listener until it is closed.
func (s *resource) serve(listener net.Listener, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		conn, err := listener.Accept()
		if err != nil {
			return
		}
		if !s.track(conn) {
			_ = conn.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			s.serveClient(conn)
		}()
	}
}

// serveClient answers one connection: a loop's requests, or a client's
// events.
func (s *resource) serveClient(conn net.Conn) {
	in := bufio.NewReader(conn)
	client := ""
	var h clientHooks
	reply := func(r string) bool {
		_, err := conn.Write([]byte(r + "\n"))
		return err == nil
	}
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return // hung up, or killed mid-line
		}
		req, err := parseRequest(line)
		if err != nil || (client == "" && req.verb != "hello" && req.verb != "events") {
			return
		}
		var id AcqID
		if client != "" && len(req.args) > 0 {
			seq, _ := strconv.ParseInt(req.args[0], 10, 64)
			id = AcqID{Client: client, Seq: seq}
		}
		switch req.verb {
		case "hello":
			client, h = req.args[0], s.hooks(req.args[0])
		case "events":
			s.events(conn, in, req.args[0])
			return
		case "call":
			n, err := req.ints(2)
			if err != nil {
				return
			}
			s.rec.called(id, req.args[1], time.Unix(0, n[0]))
		case "acq":
			n, err := req.ints(2, 3, 4, 5, 7)
			if err != nil {
				return
			}
			s.rec.acquired(Acquisition{Client: client, Seq: id.Seq, Key: req.args[1], Token: n[0],
				Sent: time.Unix(0, n[1]), Granted: time.Unix(0, n[2]), LeaseEnd: time.Unix(0, n[3]), InDoubt: req.args[6] == "true",
				Expiry: n[4]})
			if pause, d := h.plan.afterGrant(); pause {
				h.pause(FaultGrantPause, d, s.stop) // stopped right after it was handed the lock
			}
		case "op":
			n, err := req.ints(2, 3, 4)
			if err != nil {
				return
			}
			// Live unless checked at or past the lease's end: only a holder
			// that works until told writes past it (LockerConfig.UntilLost).
			s.rec.checked(id, time.Unix(0, n[1]), n[1] < n[2], time.Unix(0, n[2]))
			act, pause := h.plan.next()
			switch act {
			case actCrash:
				s.rec.crashed(id, time.Now())
				if h.kill(FaultKill) {
					return // the process is gone; nothing will read a reply
				}
				if !reply(replyCrash) {
					return
				}
				continue
			case actPause:
				h.pause(FaultPause, pause, s.stop) // the write arrives after the pause, as a stalled holder's would
			}
			accepted, ok := s.rec.write(id, req.args[1], n[0])
			if !ok {
				return
			}
			if !accepted {
				if !reply(replyStale) {
					return
				}
				continue
			}
		case "done":
			n, err := req.ints(1, 3, 4, 5)
			if err != nil {
				return
			}
			at := time.Unix(0, n[0])
			if n[2] != 0 {
				s.rec.told(id, time.Unix(0, n[2]), time.Unix(0, n[3]))
			}
			s.rec.checked(id, at, req.args[2] == "true", time.Unix(0, n[1]))
			key := s.rec.done(id, at)
			if key != "" {
				s.ann.released(key)
			}
			if kill, delay := h.plan.atRelease(); kill {
				if !reply(replyOK) {
					return
				}
				// SIGKILL in the middle of the release the client sends now.
				time.AfterFunc(delay, func() {
					s.rec.crashed(id, time.Now())
					h.kill(FaultReleaseKill)
				})
				continue
			}
		case "rel":
			n, err := req.ints(2)
			if err != nil {
				return
			}
			s.rec.released(id, req.args[1], time.Unix(0, n[0]))
		case "fail":
			n, err := req.ints(2)
			if err != nil {
				return
			}
			s.rec.failed(id, time.Unix(0, n[0]), req.args[3] == "true", strings.Join(req.args[4:], " "))
		default:
			return
		}
		if !reply(replyOK) {
			return
		}
	}
}

// events serves a client's events connection: it is announced releases,
// and it reports faults.
func (s *resource) events(conn net.Conn, in *bufio.Reader, client string) {
	s.ann.add(conn)
	defer s.ann.remove(conn)
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return
		}
		if kind, ok := strings.CutPrefix(strings.TrimSpace(line), "fault "); ok {
			s.rec.fault(kind, client)
		}
	}
}

// errStopped is returned by waits cut short by the run's end.
var errStopped = errors.New("chaos: run stopped")

// sleepOrStop sleeps for d or until stop is closed.
func sleepOrStop(d time.Duration, stop <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-stop:
		return errStopped
	}
}
