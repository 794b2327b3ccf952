package chaos

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// The resource protocol: a client sends one line per request on a unix
// socket and waits for a one-line reply. It is plain text so that a
// client process killed mid-line leaves nothing but a torn line, which the
// harness ignores.
//
//	hello <client>                                        -> ok
//	acq <seq> <key> <token> <sent> <granted> <lease-end>  -> ok
//	op <seq> <key> <token>                                -> ok | stale | crash
//	done <seq> <at>                                       -> ok
//	rel <seq> <outcome>                                   -> ok
//	fail <text>                                           -> ok
//
// A holder sends done before it sends the release to Redis, and rel with
// the release's outcome after: the end of its critical section is then on
// record before anyone else can be granted the key, even when the run
// stops while its release is still in flight.
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
	want := map[string]int{"hello": 1, "acq": 6, "op": 3, "done": 2, "rel": 2}
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
