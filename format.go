package setnxlock

import (
	"fmt"
	"strconv"
	"time"
)

// Format is how a Locker writes lock values. Whatever it writes, a Locker
// reads every format in the table below, so Lockers with different formats,
// and the classic clients of other languages, can share keys.
type Format int

const (
	// TokenFormat, the default, writes "<expiry Unix ms>:<owner token>",
	// the token being 130 random bits, then "|<identity>" when the Locker
	// has one (WithIdentity). Ownership is exact: only the lease's own
	// writes carry its token (H3, H5). Classic readers that parse the
	// leading number (parseFloat, to_f, float() up to the first non-digit)
	// see a millisecond timestamp.
	TokenFormat Format = iota
	// UnixMillis writes a bare integer of Unix milliseconds, now + TTL + 1,
	// as npm redis-lock up to 0.0.9 and jedis-lock do.
	UnixMillis
	// UnixSeconds writes a bare integer of Unix seconds, now + TTL + 1, as
	// the SETNX command page does; the +1 covers the truncation to seconds.
	UnixSeconds
	// FloatSeconds writes Unix seconds with a millisecond fraction, as
	// redis-py up to 2.9.1, redis-objects and redis-mutex do.
	FloatSeconds
)

// String returns the format's Go name.
func (f Format) String() string {
	switch f {
	case TokenFormat:
		return "TokenFormat"
	case UnixMillis:
		return "UnixMillis"
	case UnixSeconds:
		return "UnixSeconds"
	case FloatSeconds:
		return "FloatSeconds"
	}
	return "Format(" + strconv.Itoa(int(f)) + ")"
}

// WithFormat sets the format the Locker writes (default TokenFormat). The
// bare-timestamp formats carry no owner token, so ownership falls back to
// comparing the exact value, which is weaker: see docs/INTEROPERABILITY.md
// before choosing one for anything but sharing keys with classic clients.
func WithFormat(f Format) Option {
	return func(c *config) error {
		if f < TokenFormat || f > FloatSeconds {
			return fmt.Errorf("%w: unknown %v", ErrInvalidArgument, f)
		}
		c.format = f
		return nil
	}
}

// tokens reports whether values of this format carry an owner token.
func (f Format) tokens() bool { return f == TokenFormat }

// newStamp renders a lease of length ttl beginning at now. The expiry is
// the one the value states: now + ttl cut to the millisecond, or, in the
// classic writers' formats, plus their +1 (a millisecond, or a second after
// cutting to whole seconds), so no lease is shorter than ttl by more than
// the sub-millisecond cut. token and identity (WithIdentity) are ignored by
// the bare-timestamp formats, whose readers do arithmetic on the whole value.
func (f Format) newStamp(now time.Time, ttl time.Duration, token, identity string) stamp {
	end := now.Add(ttl)
	var b []byte
	switch f {
	case UnixMillis:
		// npm redis-lock: Date.now() + timeout + 1.
		end = end.Truncate(time.Millisecond).Add(time.Millisecond)
		b = strconv.AppendInt(make([]byte, 0, 16), end.UnixMilli(), 10)
	case UnixSeconds:
		// The SETNX page: current Unix time + lock timeout + 1.
		end = end.Truncate(time.Second).Add(time.Second)
		b = strconv.AppendInt(make([]byte, 0, 12), end.Unix(), 10)
	case FloatSeconds:
		end = end.Truncate(time.Millisecond)
		b = strconv.AppendInt(make([]byte, 0, 16), end.Unix(), 10)
		ms := end.UnixMilli() % 1000
		b = append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	default:
		end = end.Truncate(time.Millisecond)
		return stamp{value: formatValue(end, token, identity), expiry: end, start: now}
	}
	return stamp{value: string(b), expiry: end, start: now}
}
