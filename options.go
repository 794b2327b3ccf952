package setnxlock

import (
	"fmt"
	"time"
)

// Defaults, visible so that nobody has to guess what a Locker does.
const (
	// DefaultTTL is the lease length when WithTTL is not given.
	DefaultTTL = 10 * time.Second
	// DefaultMinBackoff is Acquire's first wait between attempts.
	DefaultMinBackoff = 5 * time.Millisecond
	// DefaultMaxBackoff caps Acquire's exponentially growing wait.
	DefaultMaxBackoff = 250 * time.Millisecond
	// DefaultStarvationThreshold is how long the first queued waiter waits
	// before releases hand it the key, when WithStarvationThreshold is not
	// given.
	DefaultStarvationThreshold = time.Millisecond
)

// Option configures a Locker. An option given an out-of-range value makes
// New return an error matching ErrInvalidArgument.
type Option func(*config) error

// config is everything a Locker needs besides its client.
type config struct {
	ttl         time.Duration
	clock       Clock
	minBackoff  time.Duration
	maxBackoff  time.Duration
	grace       time.Duration // 0: the lease's own length
	refresh     time.Duration // auto-refresh interval; 0: no auto-refresh
	autoRefresh bool
	fencing     bool
	skewMargin  time.Duration
	starvation  time.Duration // WithStarvationThreshold; 0: every release hands over in order
	observer    Observer
	calls       CallObserver // observer, when it also traces calls (calls.go)
	noScripts   bool         // WithoutScripts: only the classic commands, never EVAL/EVALSHA
	format      Format       // what we write; we read every format
	identity    string       // WithIdentity: written after the token in TokenFormat; "" for none
	classic     bool         // WithClassicCommands: SETNX and PEXPIRE, as if the server knew nothing newer

	replicas       int           // WithReplicas: replicas that must acknowledge each lease write; 0: none
	replicaTimeout time.Duration // WithReplicas: how long WAIT waits for them

	subscribeTimeout time.Duration // how long a SUBSCRIBE's confirmation is awaited; tests lengthen it
	announcedPoll    time.Duration // how often a wait that will hear of a release still polls (announcedPoll); tests lengthen it
}

func defaultConfig() config {
	return config{
		ttl:        DefaultTTL,
		clock:      systemClock{},
		minBackoff: DefaultMinBackoff,
		maxBackoff: DefaultMaxBackoff,
		starvation: DefaultStarvationThreshold,
		identity:   defaultIdentity(),

		subscribeTimeout: defaultSubscribeTimeout,
		announcedPoll:    announcedPoll,
	}
}

// WithTTL sets the lease length written into every lock value (default
// DefaultTTL). It must be at least one millisecond, the resolution of the
// stored expiry.
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: TTL %v is below 1ms", ErrInvalidArgument, d)
		}
		c.ttl = d
		return nil
	}
}

// WithClock sets the clock the Locker reads to write expiries and to decide
// whether a lease has expired (default: the local system clock). All
// processes locking the same keys must agree on time within a bound far
// smaller than the TTL; see docs/HOW-IT-WORKS.md, Guarantees and their
// assumptions.
func WithClock(clock Clock) Option {
	return func(c *config) error {
		if clock == nil {
			return fmt.Errorf("%w: nil Clock", ErrInvalidArgument)
		}
		c.clock = clock
		return nil
	}
}

// WithExpiryGrace sets how long after the end of a lease Redis itself
// deletes the key, a safety net for keys whose holder crashed and that
// nobody takes over (H6). The default is the lease's own length, so a key
// outlives its lease by at most that much. It must be at least 1ms. The
// expiry is set with a relative PEXPIRE, so no clock offset between client
// and server can make it end a live lease.
func WithExpiryGrace(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: expiry grace %v is below 1ms", ErrInvalidArgument, d)
		}
		c.grace = d
		return nil
	}
}

// WithAutoRefresh makes every lock the Locker hands out renew its own lease
// in the background, every third of the TTL unless WithRefreshInterval says
// otherwise, until it is released. A renewal that fails on the network is
// retried; the lock counts as lost, and Done is closed, when a renewal is
// refused because the key is no longer ours or when the lease runs out by
// the Locker's clock without a successful renewal.
func WithAutoRefresh() Option {
	return func(c *config) error {
		c.autoRefresh = true
		return nil
	}
}

// WithRefreshInterval turns auto-refresh on, renewing every d. It must be
// positive and shorter than the TTL.
func WithRefreshInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: refresh interval %v is not positive", ErrInvalidArgument, d)
		}
		c.autoRefresh, c.refresh = true, d
		return nil
	}
}

// refreshEvery is the auto-refresh interval: as configured, or a third of
// the TTL.
func (c *config) refreshEvery() time.Duration {
	if c.refresh > 0 {
		return c.refresh
	}
	return c.ttl / 3
}

// validate checks what no single option can: how options relate.
func (c *config) validate() error {
	if c.autoRefresh && c.refreshEvery() >= c.ttl {
		return fmt.Errorf("%w: refresh interval %v is not shorter than the TTL %v", ErrInvalidArgument, c.refreshEvery(), c.ttl)
	}
	return nil
}

// WithFencing makes every acquisition also draw a fencing token (see
// Lock.FencingToken) from a counter key beside the lock key (FenceKey).
func WithFencing() Option {
	return func(c *config) error {
		c.fencing = true
		return nil
	}
}

// WithSkewMargin makes the Locker count a foreign lease as expired only
// margin after the end it states (default 0, the SETNX page's rule). The
// safety argument then tolerates clocks of different processes disagreeing
// by up to margin: a client whose clock runs ahead by less than that still
// waits for the holder's lease to end by the holder's own clock (H4). Our
// own lease is unaffected: it ends when it says (less our clock's
// Uncertainty, with a ServerClock). A ServerClock's Uncertainty is added to
// the margin.
func WithSkewMargin(margin time.Duration) Option {
	return func(c *config) error {
		c.skewMargin = margin
		return nonNegative("skew margin", margin)
	}
}

// WithStarvationThreshold sets when a release hands the key to the first
// waiter in its queue (default DefaultStarvationThreshold), after Go's
// sync.Mutex and its normal and starvation modes. While that waiter has
// waited less than d, the release frees the key and wakes it, and whoever
// comes first takes the key, the releaser's own next Acquire included:
// short waits cost no handoff. Once it has waited d, releases hand the key
// over in order, so that no waiter's wait grows without bound. 0 hands
// every key over in order. It applies to the releases of Lockers that hand
// over (see Acquire); the wait is judged by the waiter's clock at arrival
// and the releaser's at release, so clock skew moves d by the skew.
func WithStarvationThreshold(d time.Duration) Option {
	return func(c *config) error {
		c.starvation = d
		return nonNegative("starvation threshold", d)
	}
}

// nonNegative refuses a negative duration given for what.
func nonNegative(what string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: %s %v is negative", ErrInvalidArgument, what, d)
	}
	return nil
}

// MinBackoffFloor is the smallest minimum backoff WithBackoff accepts, so
// that Acquire never spins on Redis without sleeping.
const MinBackoffFloor = 100 * time.Microsecond

// WithBackoff sets the bounds of Acquire's exponential backoff between
// attempts (defaults DefaultMinBackoff and DefaultMaxBackoff). Each wait is
// drawn with jitter from the upper half of the current step, and is cut
// short when the holder's lease ends sooner. min must be at least
// MinBackoffFloor and max at least min.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) error {
		if min < MinBackoffFloor || max < min {
			return fmt.Errorf("%w: backoff needs %v <= min <= max, got min=%v max=%v", ErrInvalidArgument, MinBackoffFloor, min, max)
		}
		c.minBackoff, c.maxBackoff = min, max
		return nil
	}
}

// WithoutScripts makes the Locker use only the classic commands (SETNX, GET,
// GETSET, DEL, PEXPIRE and WATCH/MULTI/EXEC), never EVAL or EVALSHA, even
// where the server would run scripts: for servers, proxies and ACL users
// where scripting is disabled or audited. Correctness never depends on
// scripts; they only save round trips.
func WithoutScripts() Option {
	return func(c *config) error {
		c.noScripts = true
		return nil
	}
}

// WithClassicCommands makes the Locker send only the commands of the SETNX
// page and the transactions around them: SETNX, GET, GETSET, DEL, PEXPIRE,
// WATCH/MULTI/EXEC (and PUBLISH for wake-ups). No scripts, and no SET
// options, which the Locker otherwise detects: for proxies and servers that
// mishandle anything newer, and to watch the classic algorithm at work.
func WithClassicCommands() Option {
	return func(c *config) error {
		c.classic = true
		return nil
	}
}
