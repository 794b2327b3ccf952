// Command setnxlock runs a command under a Redis lock, for scripts and cron
// across machines: a drop-in for flock(1) that kills its command when the
// lease is lost. It also reads (status) and breaks (release --force) a
// lock key, and reads (semaphore status) and resizes (semaphore resize) a
// semaphore whose permits run --permits N takes. It is built on the
// setnxlock library's public API alone.
//
//	setnxlock run [flags] KEY [--] COMMAND [ARG...]
//	setnxlock run [flags] KEY -c 'shell command'
//	setnxlock run --permits N [flags] NAME [--] COMMAND [ARG...]
//	setnxlock status [--json] KEY
//	setnxlock release --force KEY
//	setnxlock semaphore status [--json] NAME
//	setnxlock semaphore resize NAME N
//	setnxlock version
//
// See setnxlock --help, and the README's "Command line" section.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/redis/go-redis/v9"
)

func main() {
	redis.SetLogger(silent{}) // setnxlock reports errors itself, once, with its exit status
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// cli runs one invocation and returns its exit status.
func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainHelp)
		return exitUsage
	}
	var err error
	code := exitOK
	switch args[0] {
	case "run":
		code, err = runCommand(args[1:], stdout, stderr)
	case "status":
		code, err = statusCommand(args[1:], stdout, stderr)
	case "release":
		code, err = releaseCommand(args[1:], stdout, stderr)
	case "semaphore":
		code, err = semaphoreCommand(args[1:], stdout, stderr)
	case "version", "--version", "-V":
		fmt.Fprintln(stdout, "setnxlock", buildVersion())
	case "help", "-h", "--help":
		fmt.Fprint(stdout, mainHelp)
	default:
		err = usageErrorf("unknown command %q", args[0])
	}
	var usage *usageError
	switch {
	case errors.As(err, &usage):
		help := "setnxlock --help"
		if usage.topic != "" {
			help = "setnxlock " + usage.topic + " --help"
		}
		fmt.Fprintf(stderr, "setnxlock: %v\nRun '%s' for usage.\n", usage.err, help)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "setnxlock: %v\n", err)
	}
	return code
}

// usageError is bad usage: reported on stderr with exit 64, before
// anything is sent to Redis.
type usageError struct {
	topic string // the subcommand whose help to point at; "" for the top level
	err   error
}

func (e *usageError) Error() string { return e.err.Error() }

func usageErrorf(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// usageIn marks err as bad usage of the subcommand topic.
func usageIn(topic string, err error) error {
	if err == nil {
		return nil
	}
	return &usageError{topic: topic, err: err}
}

// silent drops go-redis's internal log lines (a failed dial, repeated).
type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}
