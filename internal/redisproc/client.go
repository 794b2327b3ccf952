package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// call dials addr and sends what cmd sends on a go-redis client of that one
// connection (made by newClient: redis.NewClient for a data server,
// redis.NewSentinelClient for a sentinel), closed when cmd returns. The
// dial, every write and read, and the context cmd gets all end by deadline,
// so a stopped (SIGSTOP) server costs at most that long.
//
// The dial is ours, not the client's, so that a server that is not
// listening yet (Start polls with Ping) fails at once, unretried: a failed
// dial inside go-redis is retried, logged, and leaves a goroutine probing
// the address after Close.
func call[C interface{ Close() error }, T any](newClient func(*redis.Options) C, addr string, deadline time.Time,
	cmd func(context.Context, C) (T, error)) (T, error) {
	conn, err := (&net.Dialer{Deadline: deadline}).Dial("tcp", addr)
	if err != nil {
		var zero T
		return zero, err
	}
	defer conn.Close() // in case the client never took it
	c := newClient(options(conn, deadline))
	defer c.Close()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return cmd(ctx, c)
}

// options are those of a go-redis client that uses conn alone and sends
// each command once, by deadline; nothing is sent beside the commands but
// the HELLO that opens the connection (no CLIENT SETINFO, no maintenance
// notifications).
func options(conn net.Conn, deadline time.Time) *redis.Options {
	var taken atomic.Bool
	limit := max(time.Until(deadline), time.Millisecond) // 0 would mean go-redis's default
	return &redis.Options{
		Addr: conn.RemoteAddr().String(),
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			if taken.Swap(true) {
				return nil, errors.New("redisproc: one connection per call")
			}
			return conn, nil
		},
		ReadTimeout:              limit,
		WriteTimeout:             limit,
		ContextTimeoutEnabled:    true,
		PoolSize:                 1,
		MaxRetries:               -1,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// Do sends one command to the server at addr on a connection of its own
// and returns the reply as go-redis reads it (a status or bulk string is a
// string, an integer an int64, an array an []any); the dial, the command
// and its reply all end by deadline.
func Do(addr string, deadline time.Time, args ...any) (any, error) {
	return call(redis.NewClient, addr, deadline, func(ctx context.Context, c *redis.Client) (any, error) {
		return c.Do(ctx, args...).Result()
	})
}

// role is what ROLE says about a data server.
type role struct {
	name   string // "master" or "slave"
	master string // a replica's primary, host:port
	state  string // a replica's link: "connect", "connecting", "sync", "connected"
}

// roleOf asks a data server for its ROLE, which go-redis has no helper for.
func roleOf(addr string, deadline time.Time) (role, error) {
	v, err := Do(addr, deadline, "ROLE")
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
			return role{}, fmt.Errorf("unexpected ROLE reply %v", items)
		}
		host, ok1 := items[1].(string)
		port, ok2 := items[2].(int64)
		state, ok3 := items[3].(string)
		if !ok1 || !ok2 || !ok3 {
			return role{}, fmt.Errorf("unexpected ROLE reply %v", items)
		}
		r.master, r.state = net.JoinHostPort(host, strconv.FormatInt(port, 10)), state
	}
	return r, nil
}
