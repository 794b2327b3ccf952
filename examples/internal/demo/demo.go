// Package demo holds what the example programs share: where Redis is.
package demo

import (
	"flag"
	"fmt"
	"os"

	"github.com/alicebob/miniredis/v2"
)

// AddrFlag registers the -addr flag, defaulting to $REDIS_ADDR.
func AddrFlag() *string {
	return flag.String("addr", os.Getenv("REDIS_ADDR"),
		"Redis address host:port (default $REDIS_ADDR; empty: an embedded miniredis)")
}

// Redis returns addr, or starts an embedded miniredis when addr is empty.
// It also returns a description for the program's first line and a
// function that stops what it started.
func Redis(addr string) (string, string, func()) {
	if addr != "" {
		return addr, "Redis at " + addr, func() {}
	}
	server := miniredis.NewMiniRedis()
	if err := server.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "cannot start the embedded miniredis:", err)
		os.Exit(1)
	}
	return server.Addr(), "an embedded miniredis at " + server.Addr(), server.Close
}
