package interop

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
)

// detector is the referee both sides report to: a loopback TCP server that
// takes "enter <key> <who>" and "leave <key> <who>" lines, answers each
// with "ok", and records every moment two holders were inside the same
// key's critical section at once. Holders wait for the "ok" to their leave
// before they release the lock, so the order the detector sees is the
// order things happened: a later holder can only enter after the earlier
// one's leave was recorded, unless the lock failed.
type detector struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	in   map[string][]string // key -> holders inside now
	seen map[string]int      // who's side ("node", "go") -> enters
	errs []string            // overlaps and protocol errors
	conn map[net.Conn]struct{}
}

func newDetector(t *testing.T) *detector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &detector{ln: ln, in: map[string][]string{}, seen: map[string]int{}, conn: map[net.Conn]struct{}{}}
	d.wg.Add(1)
	go d.accept()
	t.Cleanup(d.close)
	return d
}

// Addr is where holders connect.
func (d *detector) Addr() string { return d.ln.Addr().String() }

func (d *detector) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return // closed
		}
		d.mu.Lock()
		d.conn[c] = struct{}{}
		d.mu.Unlock()
		d.wg.Add(1)
		go d.serve(c)
	}
}

func (d *detector) serve(c net.Conn) {
	defer d.wg.Done()
	defer func() {
		d.mu.Lock()
		delete(d.conn, c)
		d.mu.Unlock()
		_ = c.Close()
	}()
	in := bufio.NewScanner(c)
	for in.Scan() {
		reply := "ok"
		if err := d.record(in.Text()); err != nil {
			reply = err.Error()
		}
		if _, err := fmt.Fprintln(c, reply); err != nil {
			return
		}
	}
}

// record applies one line; an overlap is recorded, not refused, so the
// holders carry on and the test reports every one of them.
func (d *detector) record(line string) error {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "enter" && f[0] != "leave" {
		d.fail("malformed line %q", line)
		return errors.New("malformed")
	}
	verb, key, who := f[0], f[1], f[2]
	d.mu.Lock()
	defer d.mu.Unlock()
	holders := d.in[key]
	if verb == "enter" {
		if len(holders) > 0 {
			d.errs = append(d.errs, fmt.Sprintf("overlap on %s: %s entered while %v inside", key, who, holders))
		}
		d.in[key] = append(holders, who)
		d.seen[side(who)]++
		return nil
	}
	for i, h := range holders {
		if h == who {
			d.in[key] = append(holders[:i:i], holders[i+1:]...)
			return nil
		}
	}
	d.errs = append(d.errs, fmt.Sprintf("%s left %s without entering", who, key))
	return nil
}

func (d *detector) fail(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, fmt.Sprintf(format, args...))
}

// side is "node" or "go", from a holder name such as "node2" or "go1/k3".
func side(who string) string {
	return strings.TrimRight(strings.SplitN(who, "/", 2)[0], "0123456789")
}

// report returns the enters per side and every overlap or protocol error.
func (d *detector) report() (enters map[string]int, problems []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	enters = map[string]int{}
	for k, v := range d.seen {
		enters[k] = v
	}
	return enters, append([]string(nil), d.errs...)
}

func (d *detector) close() {
	_ = d.ln.Close()
	d.mu.Lock()
	for c := range d.conn {
		_ = c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait() // bounded: every connection and the listener are closed
}

// detectorClient is a Go holder's connection to the detector.
type detectorClient struct {
	conn net.Conn
	in   *bufio.Reader
	who  string
}

func dialDetector(t *testing.T, addr, who string) *detectorClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &detectorClient{conn: conn, in: bufio.NewReader(conn), who: who}
}

// tell sends "<verb> <key> <who>" and waits for the detector's ack.
func (c *detectorClient) tell(verb, key string) error {
	if _, err := fmt.Fprintf(c.conn, "%s %s %s\n", verb, key, c.who); err != nil {
		return err
	}
	reply, err := c.in.ReadString('\n')
	if err != nil {
		return err
	}
	if reply = strings.TrimSpace(reply); reply != "ok" {
		return fmt.Errorf("detector: %s", reply)
	}
	return nil
}
