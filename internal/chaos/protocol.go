package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The resource protocol: a client sends one line per request on a unix
// socket and waits for a one-line reply. It is plain text so that a
// client process killed mid-line leaves nothing but a torn line, which the
// harness ignores.
//
//	hello <client>                                        -> ok
//	call <seq> <key> <at>                                 -> ok
//	acq <seq> <key> <token> <sent> <granted> <lease-end> <in-doubt> <expiry-ms> -> ok
//	op <seq> <key> <token> <checked> <lease-end>          -> ok | stale | crash
//	done <seq> <checked> <live> <lease-end> <told> <told-end> -> ok
//	rel <seq> <outcome> <at>                              -> ok
//	fail <seq> <key> <at> <in-doubt> <text>               -> ok
//	doubts <seq> <keys>                                   -> ok
//
// A loop sends call before it calls Acquire, and acq or fail when Acquire
// returns; in a semaphore run, doubts just before them: the lock keys,
// comma-separated, that its writes in doubt named ("*": any, "-": none). Each op and the done are preceded by a check of the lease by
// the holder's clock, which they carry (checked, and whether the lease was
// live for done; a check at or past the lease-end is not live). A holder
// that works until told of its loss (LockerConfig.UntilLost) writes on
// past its lease's end until its Lock tells it, and says in done when it
// was told and the lease end its Lock stated then (0 0: not told). A
// holder sends done before it sends the release to
// Redis, and rel with the release's outcome after: the end of its critical
// section is then on record before anyone else can be granted the key,
// even when the run stops while its release is still in flight.
//
// A client also opens one events connection, "events <client>", on which
// nothing is answered: the harness announces "released <key>" when a
// holder of key sends done, and the client reports the faults it injects
// into itself, "fault <kind>".
//
// Instants are wall-clock Unix nanoseconds. "crash" tells a goroutine
// client to abandon its lock as if it had died; a process client is sent
// SIGKILL instead and never reads a reply.

// Replies to op.
const (
	replyOK    = "ok"
	replyStale = "stale"
	replyCrash = "crash"
)

// resourceConn is a client's end of the protocol.
type resourceConn struct {
	conn net.Conn
	in   *bufio.Reader
}

func dialResource(path, client string) (*resourceConn, error) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	rc := &resourceConn{conn: conn, in: bufio.NewReader(conn)}
	if _, err := rc.call("hello", client); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return rc, nil
}

func (rc *resourceConn) close() error { return rc.conn.Close() }

// call sends one request and returns the reply.
func (rc *resourceConn) call(verb string, args ...string) (string, error) {
	line := verb
	if len(args) > 0 {
		line += " " + strings.Join(args, " ")
	}
	if _, err := rc.conn.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	reply, err := rc.in.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(reply), nil
}

func nanos(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

// request is one parsed line.
type request struct {
	verb string
	args []string
}

func parseRequest(line string) (request, error) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return request{}, fmt.Errorf("empty request")
	}
	want := map[string]int{"hello": 1, "events": 1, "call": 3, "acq": 8, "op": 5, "done": 6, "rel": 3, "fault": 1, "doubts": 2}
	if fields[0] == "fail" && len(fields) < 5 {
		return request{}, fmt.Errorf("fail wants at least 4 arguments, got %q", line)
	}
	if n, ok := want[fields[0]]; ok && len(fields)-1 != n {
		return request{}, fmt.Errorf("%s wants %d arguments, got %q", fields[0], n, line)
	}
	return request{verb: fields[0], args: fields[1:]}, nil
}

// parseInts parses the arguments at the given positions as int64s.
func (r request) ints(positions ...int) ([]int64, error) {
	out := make([]int64, len(positions))
	for i, p := range positions {
		n, err := strconv.ParseInt(r.args[p], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: argument %d: %w", r.verb, p, err)
		}
		out[i] = n
	}
	return out, nil
}

// eventConn is a client's events connection (see the protocol above).
type eventConn struct {
	conn net.Conn
	mu   sync.Mutex // serialises writes
}

func dialEvents(path, client string) (*eventConn, error) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	ev := &eventConn{conn: conn}
	ev.send("events " + client)
	return ev, nil
}

func (ev *eventConn) send(line string) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	_, _ = ev.conn.Write([]byte(line + "\n"))
}

// fault reports a fault the client injected into itself.
func (ev *eventConn) fault(kind string) { ev.send("fault " + kind) }

func (ev *eventConn) close() { _ = ev.conn.Close() }

// cancelOnRelease reads the harness's announcements until the connection
// closes; at each release of a key, each Acquire waiting on it is
// cancelled with probability rate, within 3ms: just before, during or
// just after the release hands the key on.
func (ev *eventConn) cancelOnRelease(waits *waiting, rate float64, rng *rand.Rand) {
	in := bufio.NewReader(ev.conn)
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return
		}
		key, ok := strings.CutPrefix(strings.TrimSpace(line), "released ")
		if !ok {
			continue
		}
		for _, p := range waits.on(key) {
			if x, delay := rng.Float64(), rng.Float64(); x < rate {
				time.AfterFunc(time.Duration(delay*float64(3*time.Millisecond)), p.cancel)
				ev.fault(FaultHandoffCancel)
			}
		}
	}
}

// HungUp reports whether err is the harness closing the resource
// connection, which is how a run ends for a client.
func HungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// oneLine makes an error fit on one protocol line.
func oneLine(err error) string {
	s := []byte(err.Error())
	for i, c := range s {
		if c == '\n' || c == '\r' {
			s[i] = ' '
		}
	}
	return string(s)
}
