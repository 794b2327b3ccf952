package chaos

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"
)

// The protected resource and the recorder: clients report their
// acquisitions and releases here and write to the resource under their
// fencing tokens. The resource is the fenced store of the fencing-token
// argument: per key it remembers the highest token it has accepted and
// refuses any lower one. Every report and every decision is recorded with
// the harness's clock.

// recorder holds the history as it is recorded. It is safe for concurrent
// use.
type recorder struct {
	mu       sync.Mutex
	stopped  bool
	acqs     map[AcqID]*Acquisition
	order    []AcqID // acquisitions in the order they were reported
	ops      []Op
	maxToken map[string]int64
	down     []Interval
	stale    int            // writes refused
	fails    []string       // Acquire errors other than the run ending
	releases map[string]int // Release outcomes

	// onAcquired is called, without mu, with the number of acquisitions
	// recorded so far.
	onAcquired func(n int)
}

func newRecorder(onAcquired func(int)) *recorder {
	return &recorder{acqs: map[AcqID]*Acquisition{}, maxToken: map[string]int64{}, releases: map[string]int{}, onAcquired: onAcquired}
}

func (r *recorder) acquired(a Acquisition) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	id := a.ID()
	if _, dup := r.acqs[id]; !dup {
		r.acqs[id] = &a
		r.order = append(r.order, id)
	}
	n := len(r.order)
	r.mu.Unlock()
	r.onAcquired(n)
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
// before it sends its release.
func (r *recorder) done(id AcqID, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.acqs[id]; a != nil && !r.stopped {
		a.Released = at
	}
}

// released counts the outcome of a release whose done is on record.
func (r *recorder) released(id AcqID, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.acqs[id]; a != nil && !r.stopped {
		r.releases[outcome]++
	}
}

// crashed marks the acquisition whose holder the harness is killing.
func (r *recorder) crashed(id AcqID, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.acqs[id]; a != nil && !r.stopped {
		a.Crashed = at
	}
}

func (r *recorder) failed(text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.fails = append(r.fails, text)
	}
}

func (r *recorder) serverDown(i Interval) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = append(r.down, i)
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
func (r *recorder) history(end time.Time) History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := History{End: end, Ops: append([]Op(nil), r.ops...), Downtime: append([]Interval(nil), r.down...)}
	for _, id := range r.order {
		h.Acquisitions = append(h.Acquisitions, *r.acqs[id])
	}
	return h
}

// action is what the harness does to a client at one of its writes.
type action int

const (
	actNone  action = iota
	actCrash        // kill the process with SIGKILL, or tell the goroutine to abandon its lock
	actPause        // stop the process (SIGSTOP) or stall the goroutine past its lease, then let the write through
)

// faultPlan decides, write by write, what happens to one client.
type faultPlan interface {
	next() (action, time.Duration)
}

// clientHooks is what the resource needs from the harness for one client.
type clientHooks struct {
	plan  faultPlan
	kill  func() bool // SIGKILL the process; false for a goroutine client
	pause func(d time.Duration, stop <-chan struct{})
}

// serveResource answers clients on listener until it is closed.
func serveResource(listener net.Listener, rec *recorder, hooks func(client string) clientHooks, stop <-chan struct{}, wg *sync.WaitGroup, track func(net.Conn) bool) {
	defer wg.Done()
	for {
		conn, err := listener.Accept()
		if err != nil {
			return
		}
		if !track(conn) {
			_ = conn.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			serveClient(conn, rec, hooks, stop)
		}()
	}
}

// serveClient answers one client's requests.
func serveClient(conn net.Conn, rec *recorder, hooks func(client string) clientHooks, stop <-chan struct{}) {
	in := bufio.NewReader(conn)
	client := ""
	var h clientHooks
	reply := func(s string) bool {
		_, err := conn.Write([]byte(s + "\n"))
		return err == nil
	}
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return // hung up, or killed mid-line
		}
		req, err := parseRequest(line)
		if err != nil || (client == "" && req.verb != "hello") {
			return
		}
		switch req.verb {
		case "hello":
			client, h = req.args[0], hooks(req.args[0])
		case "acq":
			n, err := req.ints(0, 2, 3, 4, 5)
			if err != nil {
				return
			}
			rec.acquired(Acquisition{Client: client, Seq: n[0], Key: req.args[1], Token: n[1],
				Sent: time.Unix(0, n[2]), Granted: time.Unix(0, n[3]), LeaseEnd: time.Unix(0, n[4])})
		case "op":
			n, err := req.ints(0, 2)
			if err != nil {
				return
			}
			id := AcqID{Client: client, Seq: n[0]}
			act, pause := h.plan.next()
			switch act {
			case actCrash:
				rec.crashed(id, time.Now())
				if h.kill() {
					return // the process is gone; nothing will read a reply
				}
				if !reply(replyCrash) {
					return
				}
				continue
			case actPause:
				h.pause(pause, stop) // the write arrives after the pause, as a stalled holder's would
			}
			accepted, ok := rec.write(id, req.args[1], n[1])
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
			n, err := req.ints(0, 1)
			if err != nil {
				return
			}
			rec.done(AcqID{Client: client, Seq: n[0]}, time.Unix(0, n[1]))
		case "rel":
			n, err := req.ints(0)
			if err != nil {
				return
			}
			rec.released(AcqID{Client: client, Seq: n[0]}, req.args[1])
		case "fail":
			rec.failed(line)
		default:
			return
		}
		if !reply(replyOK) {
			return
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
