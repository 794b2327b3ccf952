package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/setnxlock/setnxlock"
)

// runOptions is a parsed and checked setnxlock run.
type runOptions struct {
	url string
	key string // the lock key, or with permits the semaphore's name
	// permits is --permits: the command runs under one permit of the
	// semaphore KEY of this many permits; 0 (not given) for the lock KEY.
	permits    int
	argv       []string // the command; /bin/sh -c ... for -c
	nonblock   bool
	wait       time.Duration // 0 with waitSet: as -n
	waitSet    bool
	conflict   int
	ttl        time.Duration
	format     setnxlock.Format
	fencing    bool
	minHold    time.Duration
	killGrace  time.Duration
	maxRuntime time.Duration // 0: none
	verbose    bool
	// killDescendants kills what the command leaves in its process group
	// when it exits, instead of holding the lock until those exit.
	killDescendants bool
}

// formats maps --format's names to the library's formats.
var formats = map[string]setnxlock.Format{
	"token":   setnxlock.TokenFormat,
	"millis":  setnxlock.UnixMillis,
	"seconds": setnxlock.UnixSeconds,
	"float":   setnxlock.FloatSeconds,
}

// notCarriedOver are flock(1)'s flags that mean nothing for a Redis key,
// refused with the reason: each is a hidden flag, so that the message is
// this and not "unknown flag".
var notCarriedOver = []struct{ name, short, why string }{
	{"shared", "s", "there are no shared locks: --permits N lets up to N runs hold a semaphore at once"},
	{"unlock", "u", "there is no descriptor to unlock: the lock is released when the command exits (setnxlock release --force KEY breaks it)"},
	{"close", "o", "no descriptor is passed to the command: its process group holds the lock until it is empty (--kill-descendants ends that at the command's exit)"},
	{"no-fork", "F", "run must stay in the parent to renew the lease"},
}

// parseRun reads run's arguments. It returns help=true for --help and
// -V, and a usageError for anything wrong, having touched nothing.
//
// The forms: run [flags] KEY [flags] [--] COMMAND [ARG...], and -c
// instead of COMMAND. Flags are read up to KEY, then after KEY up to the
// first argument that is not a flag, which begins COMMAND: everything
// from there on is the command's, flags and -- included, as flock(1)
// reads it. A -- before KEY lets KEY begin with '-' (run -- -key cmd, or
// run -- -key -- cmd); flags may still follow KEY.
func parseRun(args []string, stdout io.Writer) (opts runOptions, help bool, err error) {
	fs := newFlagSet("run")
	fs.SetInterspersed(false) // stop at KEY, then at COMMAND
	url := urlFlag(fs)
	fs.BoolVarP(&opts.nonblock, "nonblock", "n", false, "fail at once if the lock is held (exit with the conflict code)")
	var wait secondsOrDuration
	fs.VarP(&wait, "wait", "w", "give up after this long: 2.5 (seconds) or 1m30s; default: wait until acquired")
	fs.Var(&wait, "timeout", "the same as --wait, flock(1)'s name for it")
	_ = fs.MarkHidden("timeout")
	fs.IntVarP(&opts.conflict, "conflict-exit-code", "E", exitConflict, "the exit status when -n or -w gives up")
	fs.IntVar(&opts.permits, "permits", 0, "run under one of N permits of the semaphore KEY: up to N runs at once (every run of KEY must give the same N)")
	fs.DurationVar(&opts.ttl, "ttl", 30*time.Second, "the lease, renewed every TTL/3 while the command runs")
	format := fs.String("format", "token", "the stored value: token, millis, seconds (kvz/cronlock, the SETNX page) or float")
	fs.BoolVar(&opts.fencing, "fencing", false, "draw a fencing token, in SETNXLOCK_FENCING_TOKEN")
	fs.DurationVar(&opts.minHold, "min-hold", 0, "hold the lock at least this long after acquiring it: the lease is left to end then")
	fs.DurationVar(&opts.killGrace, "kill-grace", 5*time.Second, "between SIGTERM and SIGKILL to the command's process group; at most TTL/3 minus a margin when the lease is about to end")
	fs.DurationVar(&opts.maxRuntime, "max-runtime", 0, "kill the command after this long (exit 124); default: no limit")
	fs.BoolVar(&opts.killDescendants, "kill-descendants", false, "when COMMAND exits, kill what it left in its process group (SIGTERM, SIGKILL after --kill-grace); default: hold the lock until they exit")
	fs.BoolVarP(&opts.verbose, "verbose", "v", false, "say on stderr when it waits, acquires, renews, loses and releases")
	shell := fs.StringP("command", "c", "", "run this with /bin/sh -c instead of a COMMAND")
	fs.BoolP("exclusive", "x", false, "an exclusive lock: the only kind, accepted as flock(1)'s")
	version := fs.BoolP("version", "V", false, "print the version and exit")
	refused := make([]*bool, len(notCarriedOver))
	for i, f := range notCarriedOver {
		refused[i] = fs.BoolP(f.name, f.short, false, f.why)
		_ = fs.MarkHidden(f.name)
	}
	fs.BoolVarP(&help, "help", "h", false, "this help")
	if err := fs.Parse(args); err != nil {
		return opts, false, usageIn("run", err)
	}
	var positional, command []string
	if positional = fs.Args(); len(positional) > 0 {
		if err := fs.Parse(positional[1:]); err != nil { // the flags after KEY
			return opts, false, usageIn("run", err)
		}
		positional, command = positional[:1], fs.Args()
	}
	switch {
	case help:
		fmt.Fprintf(stdout, runHelp, fs.FlagUsages())
		return opts, true, nil
	case *version:
		fmt.Fprintln(stdout, "setnxlock", buildVersion())
		return opts, true, nil
	}
	for i, f := range notCarriedOver {
		if *refused[i] {
			return opts, false, usageIn("run", fmt.Errorf("flock's -%s/--%s does not carry over: %s", f.short, f.name, f.why))
		}
	}
	opts.url = *url
	opts.wait, opts.waitSet = wait.d, wait.set
	if err := opts.operands(positional, command, fs.Changed("command"), *shell); err != nil {
		return opts, false, usageIn("run", err)
	}
	if fs.Changed("permits") && opts.permits < 1 {
		return opts, false, usageIn("run", fmt.Errorf("--permits %d: want at least 1", opts.permits))
	}
	if err := opts.check(*format); err != nil {
		return opts, false, usageIn("run", err)
	}
	return opts, false, nil
}

// operands reads KEY and the command: COMMAND [ARG...], or the -c shell
// command when hasShell.
func (opts *runOptions) operands(positional, command []string, hasShell bool, shell string) error {
	switch {
	case len(positional) == 0:
		return errors.New("run needs a KEY (flock's file-descriptor form has no meaning for a Redis key)")
	case positional[0] == "":
		return errors.New("KEY is empty")
	}
	opts.key = positional[0]
	switch {
	case hasShell && len(command) > 0:
		return fmt.Errorf("give either -c 'shell command' or COMMAND, not both (got COMMAND %q)", command)
	case hasShell && shell == "":
		return errors.New("-c needs a shell command")
	case hasShell:
		opts.argv = []string{"/bin/sh", "-c", shell}
	case len(command) == 0 || command[0] == "":
		return errors.New("run needs a command: KEY COMMAND [ARG...], KEY -- COMMAND [ARG...], or KEY -c 'shell command'")
	default:
		opts.argv = command
	}
	return nil
}

// check refuses options out of range or at odds, and settles the format
// and -w 0.
func (opts *runOptions) check(format string) error {
	f, ok := formats[format]
	switch {
	case !ok:
		return fmt.Errorf("--format %q: want token, millis, seconds or float", format)
	case opts.nonblock && opts.waitSet:
		return errors.New("give -n or -w, not both")
	case opts.conflict < 0 || opts.conflict > 255:
		return fmt.Errorf("--conflict-exit-code %d: want 0 to 255", opts.conflict)
	case opts.ttl < 3*time.Millisecond:
		return fmt.Errorf("--ttl %v: want at least 3ms, so that TTL/3 renewals are possible", opts.ttl)
	case opts.minHold < 0 || opts.killGrace < 0 || opts.maxRuntime < 0:
		return errors.New("--min-hold, --kill-grace and --max-runtime cannot be negative")
	}
	opts.format = f
	opts.nonblock = opts.nonblock || opts.waitSet && opts.wait == 0 // -w 0 is -n, as in flock(1)
	return nil
}
