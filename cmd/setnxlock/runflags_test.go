package main

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// run's forms, flock(1)'s among them: the command without --, flags after
// KEY up to the command, -x, a KEY beginning with '-' after --.
func TestRunReadsFlocksForms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args     []string
		key      string
		argv     []string
		nonblock bool
	}{
		{[]string{"k", "--", "ls", "-l"}, "k", []string{"ls", "-l"}, false},
		{[]string{"k", "ls", "-l"}, "k", []string{"ls", "-l"}, false},
		{[]string{"k", "ls", "-n", "--", "x"}, "k", []string{"ls", "-n", "--", "x"}, false},
		{[]string{"k", "extra", "--", "true"}, "k", []string{"extra", "--", "true"}, false},
		{[]string{"-n", "k", "true"}, "k", []string{"true"}, true},
		{[]string{"k", "-n", "true"}, "k", []string{"true"}, true},
		{[]string{"k", "--nonblock", "--", "true"}, "k", []string{"true"}, true},
		{[]string{"-x", "k", "true"}, "k", []string{"true"}, false},
		{[]string{"k", "--exclusive", "-n", "true"}, "k", []string{"true"}, true},
		{[]string{"-xn", "k", "true"}, "k", []string{"true"}, true},
		{[]string{"k", "-c", "echo hi"}, "k", []string{"/bin/sh", "-c", "echo hi"}, false},
		{[]string{"-c", "echo hi", "k"}, "k", []string{"/bin/sh", "-c", "echo hi"}, false},
		{[]string{"--", "-key", "cmd", "-n"}, "-key", []string{"cmd", "-n"}, false},
		{[]string{"--", "-key", "--", "-cmd"}, "-key", []string{"-cmd"}, false},
		{[]string{"-n", "--", "-key", "-c", "true"}, "-key", []string{"/bin/sh", "-c", "true"}, true},
		{[]string{"-w", "2", "k", "true"}, "k", []string{"true"}, false},
	} {
		opts, help, err := parseRun(c.args, io.Discard)
		if err != nil || help {
			t.Errorf("%q: help %v, error %v", c.args, help, err)
			continue
		}
		if opts.key != c.key || !slices.Equal(opts.argv, c.argv) || opts.nonblock != c.nonblock {
			t.Errorf("%q: key %q, command %q, -n %v; want %q, %q, %v", c.args, opts.key, opts.argv, opts.nonblock, c.key, c.argv, c.nonblock)
		}
	}
}

// -V prints the version, as flock -V; --kill-descendants is read.
func TestRunReadsVersionAndKillDescendants(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if _, help, err := parseRun([]string{"-V"}, &out); err != nil || !help || !strings.HasPrefix(out.String(), "setnxlock ") {
		t.Errorf("run -V: help %v, error %v, printed %q", help, err, out.String())
	}
	if opts, _, err := parseRun([]string{"k", "--kill-descendants", "true"}, io.Discard); err != nil || !opts.killDescendants {
		t.Errorf("--kill-descendants after KEY: %v, error %v", opts.killDescendants, err)
	}
}

// flock's flags that mean nothing for a Redis key, and forms that cannot
// be read, are bad usage, saying why.
func TestRunRefusesWhatDoesNotCarryOver(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-s", "k", "true"}, "--permits"},
		{[]string{"k", "--shared", "true"}, "--permits"},
		{[]string{"-u", "k"}, "release --force"},
		{[]string{"-o", "k", "true"}, "--kill-descendants"},
		{[]string{"-F", "k", "true"}, "renew"},
		{[]string{"-n"}, "file-descriptor"},
		{[]string{"k"}, "needs a command"},
		{[]string{"--", "-key"}, "needs a command"},
		{[]string{"k", "-c", "true", "extra"}, "not both"},
		{[]string{"k", "-c", "true", "--", "true"}, "not both"},
	} {
		_, _, err := parseRun(c.args, io.Discard)
		var usage *usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: error %v; want bad usage saying %q", c.args, err, c.says)
		}
	}
}
