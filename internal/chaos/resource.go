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
		default:
			switch s.answer(client, id, h, req, reply) {
			case hangUp:
				return
			case answered:
				continue
			}
		}
		if !reply(replyOK) {
			return
		}
	}
}

// afterRequest is what serveClient does once a request is handled.
type afterRequest int

const (
	answerOK afterRequest = iota // answer ok
	answered                     // the answer has been sent
	hangUp                       // hang up: a malformed request, or a client gone
)

// answer handles one request of a loop of client, which said hello, and
// records it; id is the acquisition its sequence number names. reply
// sends an answer, and reports whether it could.
func (s *resource) answer(client string, id AcqID, h clientHooks, req request, reply func(string) bool) afterRequest {
	switch req.verb {
	case "call":
		n, err := req.ints(2)
		if err != nil {
			return hangUp
		}
		s.rec.called(id, req.args[1], time.Unix(0, n[0]))
	case "acq":
		n, err := req.ints(2, 3, 4, 5, 7)
		if err != nil {
			return hangUp
		}
		s.rec.acquired(Acquisition{Client: client, Seq: id.Seq, Key: req.args[1], Token: n[0],
			Sent: time.Unix(0, n[1]), Granted: time.Unix(0, n[2]), LeaseEnd: time.Unix(0, n[3]), InDoubt: req.args[6] == "true",
			Expiry: n[4]})
		if pause, d := h.plan.afterGrant(); pause {
			h.pause(FaultGrantPause, d, s.stop) // stopped right after it was handed the lock
		}
	case "op":
		return s.onOp(id, h, req, reply)
	case "done":
		return s.onDone(id, h, req, reply)
	case "doubts":
		s.rec.doubtedOn(id, parseDoubtList(req.args[1]))
	case "rel":
		n, err := req.ints(2)
		if err != nil {
			return hangUp
		}
		s.rec.released(id, req.args[1], time.Unix(0, n[0]))
	case "fail":
		n, err := req.ints(2)
		if err != nil {
			return hangUp
		}
		s.rec.failed(id, time.Unix(0, n[0]), req.args[3] == "true", strings.Join(req.args[4:], " "))
	default:
		return hangUp
	}
	return answerOK
}

// onOp is the resource's decision on a holder's write, after the fault
// the plan draws for it: a crash, or a pause before the write arrives.
func (s *resource) onOp(id AcqID, h clientHooks, req request, reply func(string) bool) afterRequest {
	n, err := req.ints(2, 3, 4)
	if err != nil {
		return hangUp
	}
	// Live unless checked at or past the lease's end: only a holder
	// that works until told writes past it (LockerConfig.UntilLost).
	s.rec.checked(id, time.Unix(0, n[1]), n[1] < n[2], time.Unix(0, n[2]))
	act, pause := h.plan.next()
	switch act {
	case actCrash:
		s.rec.crashed(id, time.Now())
		if h.kill(FaultKill) {
			return hangUp // the process is gone; nothing will read a reply
		}
		if !reply(replyCrash) {
			return hangUp
		}
		return answered
	case actPause:
		h.pause(FaultPause, pause, s.stop) // the write arrives after the pause, as a stalled holder's would
	}
	accepted, ok := s.rec.write(id, req.args[1], n[0])
	if !ok {
		return hangUp
	}
	if !accepted {
		if !reply(replyStale) {
			return hangUp
		}
		return answered
	}
	return answerOK
}

// onDone records the end of a holder's critical section, announces the
// release of its key, and may kill the process in the middle of the
// release it sends next.
func (s *resource) onDone(id AcqID, h clientHooks, req request, reply func(string) bool) afterRequest {
	n, err := req.ints(1, 3, 4, 5)
	if err != nil {
		return hangUp
	}
	at := time.Unix(0, n[0])
	if n[2] != 0 {
		s.rec.told(id, time.Unix(0, n[2]), time.Unix(0, n[3]))
	}
	s.rec.checked(id, at, req.args[2] == "true", time.Unix(0, n[1]))
	if key := s.rec.done(id, at); key != "" {
		for _, k := range groupKeys(key) { // each key of a group (multi.go)
			s.ann.released(k)
		}
	}
	if kill, delay := h.plan.atRelease(); kill {
		if !reply(replyOK) {
			return hangUp
		}
		// SIGKILL in the middle of the release the client sends now.
		time.AfterFunc(delay, func() {
			s.rec.crashed(id, time.Now())
			h.kill(FaultReleaseKill)
		})
		return answered
	}
	return answerOK
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
		line = strings.TrimSpace(line)
		if kind, ok := strings.CutPrefix(line, "fault "); ok {
			s.rec.fault(kind, client)
		}
		if doubt, ok := strings.CutPrefix(line, "doubt "); ok {
			s.rec.doubt(client, doubt)
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
