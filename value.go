package setnxlock

import (
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The stored value.
//
// We write "<expiry unix ms>:<owner token>", followed by
// "|<identity>" when the Locker has an identity (WithIdentity): who holds
// the lease, for people and tools; classic clients read only the leading
// number. The token is crypto/rand.Text (26 base32 characters, A-Z and
// 2-7, 130 random bits), new for every lease, so ownership is an exact
// string comparison of tokens (H3, H5).
//
// The token of a value is exactly the bytes between its first ':' and the
// first '|' after it, or its end (tokenOf; lua/value.lua says the same for
// the scripts). Neither separator is in the token's alphabet, and an
// identity may hold neither '|' nor a control character (validIdentity),
// so the parse is unique whichever end it starts from: nothing an
// identity says can make a value carry another token, and the owner check
// is exact on the token whatever follows it. A value written for a queued
// waiter by another Locker (a release's provisional value, protocol.go)
// carries the waiter's token and no identity, since the releaser does not
// know the waiter's; the waiter recognises it by the token alone.
//
// We read every classic format: an integer or decimal number of Unix seconds
// or milliseconds (told apart by magnitude), optionally followed by a suffix
// that starts with a separator such as ':' or ' '.

const (
	// Numbers below this are seconds, at or above it milliseconds. 1e11
	// seconds is the year 5138; 1e11 milliseconds is March 1973.
	secondsMillisBoundary = 1e11
	// Millisecond values at or above this (the year 5138 again) are not a
	// lock expiry but something else, such as microseconds.
	maxExpiryMillis = 1e14
)

// tokenSeparator ends a value's expiry where an owner token follows.
const tokenSeparator = ':'

// identitySeparator ends a value's owner token where the holder's identity
// follows. It is in neither the token's alphabet nor any identity.
const identitySeparator = '|'

// maxIdentity is the longest identity WithIdentity accepts, in bytes.
const maxIdentity = 256

// newToken returns a fresh owner token of at least 128 random bits.
func newToken() string { return rand.Text() }

// formatValue renders a value of our own format: the holder's identity
// follows the token when there is one ("" for none).
func formatValue(expiry time.Time, token, identity string) string {
	var buf [64 + maxIdentity]byte // on the stack: the string is the one allocation
	b := strconv.AppendInt(buf[:0], expiry.UnixMilli(), 10)
	b = append(b, tokenSeparator)
	b = append(b, token...)
	if identity != "" {
		b = append(b, identitySeparator)
		b = append(b, identity...)
	}
	return string(b)
}

// tokenOf returns the owner token of a value of our own format, or "" when
// the value carries none: the bytes between the value's first ':' and the
// first '|' after it, or its end. Every value we write for one lease
// carries that lease's token, and only our own conditional writes do.
func tokenOf(value string) string {
	_, rest, _ := strings.Cut(value, string(tokenSeparator))
	token, _, _ := strings.Cut(rest, string(identitySeparator))
	return token
}

// identityOf returns the holder's identity a value states after its owner
// token, or "" when it states none: a bare timestamp, a value of an older
// version or a foreign client, or an identity part that is not one
// (validIdentity), which is ignored, the value read by its leading number.
func identityOf(value string) string {
	_, rest, ok := strings.Cut(value, string(tokenSeparator))
	if !ok {
		return ""
	}
	_, identity, ok := strings.Cut(rest, string(identitySeparator))
	if !ok || validIdentity(identity) != nil {
		return ""
	}
	return identity
}

// parseExpiry reads the expiry instant out of any classic lock value. A
// value it cannot read is H7: the caller reports ErrNotLockValue and leaves
// the key alone.
func parseExpiry(value string) (time.Time, error) {
	number, ok := leadingNumber(value)
	if !ok {
		return time.Time{}, notLockValue(value, "no leading Unix timestamp")
	}
	whole, fraction, isDecimal := strings.Cut(number, ".")
	n, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || n >= maxExpiryMillis {
		return time.Time{}, notLockValue(value, "timestamp out of range")
	}
	if n >= secondsMillisBoundary {
		// Milliseconds; a fraction of a millisecond does not matter.
		return time.UnixMilli(n), nil
	}
	var nanos int64
	if isDecimal {
		digits := (fraction + "000000000")[:9]
		nanos, _ = strconv.ParseInt(digits, 10, 64) // nine ASCII digits always parse
	}
	return time.Unix(n, nanos), nil
}

// heldUntil is when a reader may take over the lease a value states: the
// expiry it states, except that a whole number of Unix seconds is held
// through the end of that second. Classic readers of that format (the
// SETNX page's, kvz/cronlock's) treat a value equal to the current second
// as live; and cronlock releases with GETSET key <second> followed, moments
// later, by EXPIREAT key <second>, which deletes whatever the key holds by
// then: a taker that counted the lease over at the start of its second
// would lose the key to that EXPIREAT while a second client SETNXes it.
// Decimal seconds and milliseconds state their instant exactly.
func heldUntil(value string) (time.Time, error) {
	expiry, err := parseExpiry(value)
	if err != nil {
		return time.Time{}, err
	}
	if number, _ := leadingNumber(value); isWholeSeconds(number) {
		return expiry.Add(time.Second), nil
	}
	return expiry, nil
}

// isWholeSeconds reports whether a value's leading number is a whole
// number of Unix seconds: no '.', below the milliseconds.
func isWholeSeconds(number string) bool {
	n, err := strconv.ParseInt(number, 10, 64)
	return err == nil && n < secondsMillisBoundary
}

// leadingNumber returns the decimal number the value starts with: digits,
// optionally one '.' and more digits. Whatever follows must begin with a
// separator, not a letter or digit, so "17x" or "1.2.3" are not numbers.
func leadingNumber(value string) (string, bool) {
	i := 0
	for i < len(value) && isDigit(value[i]) {
		i++
	}
	if i == 0 {
		return "", false
	}
	if i < len(value) && value[i] == '.' {
		j := i + 1
		for j < len(value) && isDigit(value[j]) {
			j++
		}
		if j == i+1 {
			return "", false
		}
		i = j
	}
	if i < len(value) && !isSeparator(value[i]) {
		return "", false
	}
	return value[:i], true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isSeparator reports whether c may start a suffix after the timestamp.
func isSeparator(c byte) bool {
	switch {
	case isDigit(c), 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '.':
		return false
	}
	return c < 0x80
}

// notLockValue builds the H7 error, quoting at most a short prefix of the
// offending value.
func notLockValue(value, why string) error {
	const show = 40
	if len(value) > show {
		value = value[:show] + "…"
	}
	return fmt.Errorf("%w: %s in %q", ErrNotLockValue, why, value)
}
