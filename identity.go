package setnxlock

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Who holds a lock: the holder's identity, written after the owner token
// of every lease value in TokenFormat ("<expiry ms>:<token>|<identity>",
// value.go), where GET shows it and classic clients, which read only the
// leading number, ignore it. It is for people and tools (Status, Leader,
// setnxlock status); ownership never reads it.

// WithIdentity sets who the Locker's leases say holds them (default:
// DefaultIdentity, the host name and process id, as client-go's
// HolderIdentity). It is written after the owner token of every value in
// TokenFormat; the bare timestamp formats (WithFormat) stay bare, since
// their readers do arithmetic on the whole value. "" writes no identity.
// An identity longer than 256 bytes, not UTF-8, or holding a control
// character or '|' (the separator before it) is ErrInvalidArgument.
func WithIdentity(s string) Option {
	return func(c *config) error {
		if err := validIdentity(s); err != nil {
			return fmt.Errorf("%w: WithIdentity: %w", ErrInvalidArgument, err)
		}
		c.identity = s
		return nil
	}
}

// DefaultIdentity is the identity a Locker writes without WithIdentity:
// "<host name>:<process id>", the host name cut short and stripped of
// what an identity may not hold, or "unknown" in place of a host name the
// system does not tell.
func DefaultIdentity() string { return defaultIdentity() }

var defaultIdentity = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil {
		host = ""
	}
	return hostIdentity(host, os.Getpid())
})

// hostIdentity is the identity of process pid on host: "<host>:<pid>",
// the host name stripped of what an identity may not hold and cut short
// to fit, or "unknown" for an empty one.
func hostIdentity(host string, pid int) string {
	if host == "" {
		host = "unknown"
	}
	suffix := ":" + strconv.Itoa(pid)
	host = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || r == identitySeparator || unicode.IsControl(r) {
			return '_'
		}
		return r
	}, host)
	for len(host)+len(suffix) > maxIdentity || !utf8.ValidString(host) {
		host = host[:len(host)-1] // a rune cut in two is cut off whole at the next turn
	}
	return host + suffix
}

// validIdentity reports why s cannot be an identity, or nil. Excluding '|'
// keeps a value's token and identity apart (tokenOf); excluding control
// characters keeps what GET and status print one readable line.
func validIdentity(s string) error {
	switch {
	case len(s) > maxIdentity:
		return fmt.Errorf("identity of %d bytes is over %d", len(s), maxIdentity)
	case !utf8.ValidString(s):
		return errors.New("identity is not UTF-8")
	case strings.ContainsRune(s, identitySeparator):
		return fmt.Errorf("identity %q holds %q, the separator before it", s, identitySeparator)
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("identity %q holds a control character", s)
	}
	return nil
}
