package redisproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ReplyError is an error reply from a server ("-ERR ...", "-READONLY ...").
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// maxBulk bounds a bulk string or an array read from a server, so that a
// garbled reply fails instead of allocating without limit.
const maxBulk = 64 << 20

// do sends one command on a connection of its own and returns the reply,
// speaking just enough RESP2 to set up and watch servers without a client
// library: a status or bulk string is a string, an integer an int64, an
// array an []any, a null nil; an error reply is returned as a ReplyError.
// Dialling, sending and reading all end by deadline, so a stopped (SIGSTOP)
// server costs at most that long.
func do(addr string, deadline time.Time, args ...string) (any, error) {
	d := net.Dialer{Deadline: deadline}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(conn))
}

// readReply reads one RESP2 reply. An error reply inside an array ends the
// read with that error: none of the commands sent here nests one.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, ReplyError(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$', '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > maxBulk {
			return nil, fmt.Errorf("unexpected reply header %q", line)
		}
		if n < 0 {
			return nil, nil // a null bulk string or array
		}
		if line[0] == '$' {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return nil, err
			}
			return string(buf[:n]), nil
		}
		items := make([]any, n)
		for i := range items {
			if items[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return items, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

// fields turns a flat array of alternating names and values (one entry of
// SENTINEL MASTER, REPLICAS or SENTINELS) into a map.
func fields(v any) (map[string]string, error) {
	items, ok := v.([]any)
	if !ok || len(items)%2 != 0 {
		return nil, fmt.Errorf("not a flat array of names and values: %v", v)
	}
	m := make(map[string]string, len(items)/2)
	for i := 0; i < len(items); i += 2 {
		name, ok1 := items[i].(string)
		value, ok2 := items[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("not a flat array of names and values: %v", v)
		}
		m[name] = value
	}
	return m, nil
}

// fieldsList turns an array of flat arrays (SENTINEL REPLICAS, SENTINEL
// SENTINELS) into maps.
func fieldsList(v any) ([]map[string]string, error) {
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("not an array: %v", v)
	}
	list := make([]map[string]string, len(items))
	for i, item := range items {
		m, err := fields(item)
		if err != nil {
			return nil, err
		}
		list[i] = m
	}
	return list, nil
}

// role is what ROLE says about a data server.
type role struct {
	name   string // "master" or "slave"
	master string // a replica's primary, host:port
	state  string // a replica's link: "connect", "connecting", "sync", "connected"
}

// roleOf asks a data server for its ROLE.
func roleOf(addr string, deadline time.Time) (role, error) {
	v, err := do(addr, deadline, "ROLE")
	if err != nil {
		return role{}, err
	}
	items, ok := v.([]any)
	if !ok || len(items) == 0 {
		return role{}, fmt.Errorf("unexpected ROLE reply %v", v)
	}
	r := role{}
	r.name, _ = items[0].(string)
	if r.name == "slave" {
		if len(items) < 4 {
			return role{}, fmt.Errorf("unexpected ROLE reply %v", v)
		}
		host, ok1 := items[1].(string)
		port, ok2 := items[2].(int64)
		state, ok3 := items[3].(string)
		if !ok1 || !ok2 || !ok3 {
			return role{}, fmt.Errorf("unexpected ROLE reply %v", v)
		}
		r.master, r.state = net.JoinHostPort(host, strconv.FormatInt(port, 10)), state
	}
	return r, nil
}
