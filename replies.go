package setnxlock

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Reading the server's error replies. A reply's first word is its error
// code, and decisions are made on the code, never on a word of the prose
// after it (MISCONF's prose, for one, says "disabled").

// reply splits an error reply into its code and its message; ok is false
// when err is not a reply from the server (a transport error, say).
func reply(err error) (code, message string, ok bool) {
	if err == nil {
		return "", "", false // before errors.As, whose target escapes: one allocation per command otherwise
	}
	var redisErr redis.Error
	if !errors.As(err, &redisErr) {
		return "", "", false
	}
	code, message, _ = strings.Cut(redisErr.Error(), " ")
	return code, message, true
}

// refused reports whether err is a refusal for good: the server, a proxy
// or the ACL user does not allow a command or an option, so the Locker may
// stop using it. It reads the reply's error code, the first word, never a
// word of its prose: NOPERM is a refusal; the generic ERR code is one only
// with the fixed messages Redis and proxies give for a command, subcommand
// or option they do not know (refusedMessages). Every other code is
// transient or a real failure, and never switches a feature off: MISCONF,
// OOM, READONLY, LOADING, BUSY, TRYAGAIN, MASTERDOWN, CLUSTERDOWN,
// NOREPLICAS. Inside a transaction the refused command's own error comes
// first (withCause), so an EXECABORT caused by LOADING during a restart is
// not mistaken for one. NOSCRIPT is not a refusal either: go-redis answers
// it by sending the script itself with EVAL.
func refused(err error) bool {
	code, message, ok := reply(err)
	if !ok {
		return false
	}
	switch code {
	case "NOPERM":
		return true
	case "ERR":
		message = strings.ToLower(message)
		for _, prefix := range refusedMessages {
			if strings.HasPrefix(message, prefix) {
				return true
			}
		}
	}
	return false
}

// refusedMessages begin the ERR replies that mean "not here, not ever": an
// unknown command or subcommand, an option a server older than it does not
// parse (SET's NX and PX before Redis 2.6.12), proxies that do not pass a
// command on, and Redis 7.0's ACL refusals of commands inside scripts
// (later versions answer those with NOPERM).
var refusedMessages = []string{
	"unknown command", "unknown subcommand", "syntax error", "wrong number of arguments",
	"unsupported command", "command not supported", "command not allowed",
	"the user executing the script can't", // Redis 7.0's ACL refusal of a command a script runs
}

// scriptError is an error a script met on a command it ran with pcall and
// returned as text, so that it is read by its code like any reply.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks scriptError as a reply of the server (redis.Error).
func (scriptError) RedisError() {}

// scriptErr is the error a script returned as text, or nil for "".
func scriptErr(text string) error {
	if text == "" {
		return nil
	}
	return scriptError(text)
}

// transientCodes are the codes of replies that say "not now": the server
// is loading, a replica, out of memory or disk for the moment, failing
// over, or busy. Acquire retries them; nothing is switched off for them.
var transientCodes = map[string]bool{
	"LOADING": true, "READONLY": true, "TRYAGAIN": true, "CLUSTERDOWN": true, "MASTERDOWN": true,
	"BUSY": true, "MISCONF": true, "OOM": true, "NOREPLICAS": true,
}

// transient reports whether err is a reply that says "not now".
func transient(err error) bool {
	code, _, ok := reply(err)
	return ok && transientCodes[code]
}

// isReplyError reports whether err is an error reply of the server, not a
// transport failure or nil.
func isReplyError(err error) bool {
	_, _, ok := reply(err)
	return ok && !errors.Is(err, redis.Nil)
}

// isWrongType reports a WRONGTYPE reply: the key is not a string (H7).
func isWrongType(err error) bool {
	code, _, ok := reply(err)
	return ok && code == "WRONGTYPE"
}

// stringReply unpacks a bulk-string reply, turning a missing key into
// found=false and a WRONGTYPE reply into ErrNotLockValue (H7).
func stringReply(cmd *redis.StringCmd) (string, bool, error) {
	value, err := cmd.Result()
	switch {
	case err == nil:
		return value, true, nil
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case isWrongType(err):
		return "", false, errors.Join(ErrNotLockValue, err)
	default:
		return "", false, err
	}
}
