package redisproc

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// redis-sentinel on the PATH runs as it is; otherwise redis-server runs
// with --sentinel, and $REDIS_SERVER_BIN, when set, is the sentinel too.
func TestSentinelBinaryPrefersRedisSentinelUnlessTheServerIsOverridden(t *testing.T) {
	server := binary(t)
	onPath := t.TempDir()
	sentinel := filepath.Join(onPath, "redis-sentinel")
	if err := os.Symlink(server, sentinel); err != nil {
		t.Fatal(err)
	}

	t.Setenv("PATH", onPath)
	t.Setenv(BinaryEnv, "")
	bin, args, err := SentinelBinary()
	if err != nil || bin != sentinel || len(args) != 0 {
		t.Errorf("with redis-sentinel on the PATH: %q %q %v, want %q with no arguments", bin, args, err, sentinel)
	}

	t.Setenv(BinaryEnv, server)
	bin, args, err = SentinelBinary()
	if err != nil || bin != server || !slices.Equal(args, []string{"--sentinel"}) {
		t.Errorf("with %s=%s: %q %q %v, want it with --sentinel", BinaryEnv, server, bin, args, err)
	}

	t.Setenv(BinaryEnv, "")
	t.Setenv("PATH", t.TempDir())
	bin, args, err = SentinelBinary()
	if _, statErr := os.Stat("/usr/bin/redis-server"); statErr != nil {
		if !errors.Is(err, ErrNoSentinel) {
			t.Errorf("with neither binary: %q %q %v, want ErrNoSentinel", bin, args, err)
		}
	} else if err != nil || bin != "/usr/bin/redis-server" || !slices.Equal(args, []string{"--sentinel"}) {
		t.Errorf("without redis-sentinel: %q %q %v, want /usr/bin/redis-server --sentinel", bin, args, err)
	}
}

// The RESP reader behind the Sentinel helper reads every kind of reply.
func TestDoReadsEveryKindOfReply(t *testing.T) {
	s, err := Start(Config{Bin: binary(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	deadline := time.Now().Add(5 * time.Second)
	port := strconv.Itoa(s.Port())
	for _, c := range []struct {
		args []string
		want any
	}{
		{[]string{"SET", "k", "line 1\r\nline 2"}, "OK"},         // a status
		{[]string{"GET", "k"}, "line 1\r\nline 2"},               // a bulk string holding CRLF
		{[]string{"GET", "missing"}, nil},                        // a null
		{[]string{"INCR", "n"}, int64(1)},                        // an integer
		{[]string{"ECHO", ""}, ""},                               // an empty bulk string
		{[]string{"LRANGE", "missing", "0", "-1"}, []any{}},      // an empty array
		{[]string{"CONFIG", "GET", "port"}, []any{"port", port}}, // an array
	} {
		got, err := do(s.Addr(), deadline, c.args...)
		if err != nil || !equalReply(got, c.want) {
			t.Errorf("%q: %#v, %v; want %#v", c.args, got, err, c.want)
		}
	}
	if _, err := do(s.Addr(), deadline, "NOSUCHCOMMAND"); !errors.As(err, new(ReplyError)) {
		t.Errorf("an unknown command: %v, want a ReplyError", err)
	}
	if r, err := roleOf(s.Addr(), deadline); err != nil || r.name != "master" {
		t.Errorf("ROLE: %+v, %v; want a master", r, err)
	}
}

func equalReply(a, b any) bool {
	as, ok1 := a.([]any)
	bs, ok2 := b.([]any)
	if ok1 != ok2 {
		return false
	}
	if !ok1 {
		return a == b
	}
	return slices.EqualFunc(as, bs, equalReply)
}

// A stopped server holds a command no longer than its deadline.
func TestDoEndsAtItsDeadlineOnAPausedServer(t *testing.T) {
	s, err := Start(Config{Bin: binary(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, err := do(s.Addr(), began.Add(200*time.Millisecond), "PING"); err == nil {
		t.Fatal("a paused server answered")
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("a command to a paused server took %v with a 200ms deadline", took)
	}
}

func TestStartSentinelRefusesABadConfigBeforeStartingAnything(t *testing.T) {
	for _, cfg := range []SentinelConfig{
		{},
		{Dir: t.TempDir(), MasterName: "two words"},
		{Dir: t.TempDir(), DownAfter: -time.Second},
	} {
		if d, err := StartSentinel(cfg); err == nil {
			d.Kill()
			t.Errorf("%+v: started", cfg)
		}
	}
}
