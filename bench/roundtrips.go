package main

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
)

// writes counts the writes every worker client made to the server. go-redis
// flushes one command, one pipeline or one MULTI/EXEC block per write, so
// writes are round trips; unlike INFO commandstats they do not count the
// commands a script runs inside the server. The runs are sequential, so
// one counter serves them all.
var writes atomic.Int64

// countingDial dials TCP and counts the connection's writes.
func countingDial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn}, nil
}

// countingConn is a net.Conn that counts its writes. It passes SyscallConn
// through, so go-redis still health-checks pooled connections as it does
// on a bare TCP connection.
type countingConn struct{ net.Conn }

func (c *countingConn) Write(b []byte) (int, error) {
	writes.Add(1)
	return c.Conn.Write(b)
}

// SyscallConn exposes the TCP connection's raw descriptor to go-redis's
// pool health check.
func (c *countingConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("not a syscall.Conn")
}
