package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// secondsOrDuration is a duration flag that also takes plain seconds,
// "2.5", as flock(1)'s -w does; set records whether it was given.
type secondsOrDuration struct {
	d   time.Duration
	set bool
}

func (s *secondsOrDuration) String() string {
	if !s.set {
		return ""
	}
	return s.d.String()
}

func (s *secondsOrDuration) Set(text string) error {
	d, err := parseSecondsOrDuration(text)
	if err != nil {
		return err
	}
	s.d, s.set = d, true
	return nil
}

func (s *secondsOrDuration) Type() string { return "duration" }

// parseSecondsOrDuration reads "2.5" as seconds and "1m30s" as a Go
// duration; negative values are refused.
func parseSecondsOrDuration(text string) (time.Duration, error) {
	var d time.Duration
	if seconds, err := strconv.ParseFloat(text, 64); err == nil && !strings.ContainsAny(text, "eEnN") {
		if seconds > float64(1<<62)/float64(time.Second) {
			return 0, fmt.Errorf("%q is too long", text)
		}
		d = time.Duration(seconds * float64(time.Second))
	} else if d, err = time.ParseDuration(text); err != nil {
		return 0, fmt.Errorf("%q is neither seconds (2.5) nor a duration (1m30s)", text)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", text)
	}
	return d, nil
}

// urlFlag adds --url to a subcommand's flags.
func urlFlag(fs *pflag.FlagSet) *string {
	return fs.String("url", urlFromEnv(), "the Redis server (env "+urlEnv+"; see setnxlock --help)")
}

// newFlagSet returns a flag set that reports errors to its caller, not
// to stderr, and lets flags and arguments mix.
func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetInterspersed(true)
	fs.SortFlags = false
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	return fs
}
