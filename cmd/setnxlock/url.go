package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// urlEnv names the environment variable that --url defaults to.
const urlEnv = "SETNXLOCK_URL"

// defaultURL is the server when neither --url nor SETNXLOCK_URL says.
const defaultURL = "redis://127.0.0.1:6379/0"

// urlFromEnv is --url's default: $SETNXLOCK_URL, else defaultURL.
func urlFromEnv() string {
	if u := os.Getenv(urlEnv); u != "" {
		return u
	}
	return defaultURL
}

// urlHelp documents the URL forms in --help.
const urlHelp = `Servers (--url, or SETNXLOCK_URL; default ` + defaultURL + `):
  redis://[user:password@]host:port/db     one server
  rediss://[user:password@]host:port/db    one server over TLS
  unix://[user:password@]/path/redis.sock?db=N
  redis+sentinel://[user:password@]sentinel:26379/db?master_name=NAME[&addr=sentinel2:26379...]
                                           the primary a Sentinel group names (rediss+sentinel:// for TLS);
                                           user and password go to the sentinels and to the primary
  redis+cluster://[user:password@]node:7000[?addr=node2:7000...]
                                           a Redis Cluster, from any of its nodes (rediss+cluster:// for TLS)
  Query parameters set go-redis options, e.g. ?dial_timeout=2s&read_timeout=3s.`

// newClient connects to the server a URL names, without sending anything:
// go-redis dials on the first command. A URL it cannot read is a usage
// error. Every scheme's client has ContextTimeoutEnabled, which go-redis's
// URL parsers leave off (and, for redis://, refuse): without it a round
// trip ignores its context's deadline and waits out the read timeout and
// the retries, seconds after the lease it was renewing has ended (H11).
// With it, a renewal ends by its deadline, which the library's keeper
// sets at the lease's end.
func newClient(raw string) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, fmt.Errorf("--url %q: want scheme://..., such as %s", raw, defaultURL)
	}
	switch scheme {
	case "redis", "rediss", "unix":
		opts, err := redis.ParseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("--url %q: %w", raw, err)
		}
		opts.DialerRetries = quickDial(opts.DialerRetries)
		opts.ContextTimeoutEnabled = true
		return redis.NewClient(opts), nil
	case "redis+sentinel", "rediss+sentinel":
		opts, err := redis.ParseFailoverURL(strings.TrimSuffix(scheme, "+sentinel") + "://" + rest)
		if err != nil {
			return nil, fmt.Errorf("--url %q: %w", raw, err)
		}
		if opts.MasterName == "" {
			return nil, fmt.Errorf("--url %q: a Sentinel URL names its primary with ?master_name=NAME", raw)
		}
		opts.Username, opts.Password = opts.SentinelUsername, opts.SentinelPassword
		opts.DialerRetries = quickDial(opts.DialerRetries)
		opts.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(opts), nil
	case "redis+cluster", "rediss+cluster":
		opts, err := redis.ParseClusterURL(strings.TrimSuffix(scheme, "+cluster") + "://" + rest)
		if err != nil {
			return nil, fmt.Errorf("--url %q: %w", raw, err)
		}
		opts.DialerRetries = quickDial(opts.DialerRetries)
		opts.ContextTimeoutEnabled = true
		return redis.NewClusterClient(opts), nil
	}
	return nil, fmt.Errorf("--url %q: unknown scheme %q (redis, rediss, unix, redis+sentinel, rediss+sentinel, redis+cluster, rediss+cluster)", raw, scheme)
}

// redactURL is the URL for messages, its password hidden.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the server"
	}
	return u.Redacted()
}

// quickDial is the dial attempts per command: one unless the URL says
// (?dialer_retries=N). go-redis's default of 5, times its command retries,
// would keep a run waiting seconds on a server that is down, where the
// issue wants exit 69 at once; commands are still retried (max_retries).
func quickDial(fromURL int) int {
	if fromURL != 0 {
		return fromURL
	}
	return 1
}
