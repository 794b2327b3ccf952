package redisproc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// ROLE, which go-redis has no helper for, is read for a primary and for a
// replica: its primary's address and the state of its link.
func TestRoleOfReadsAPrimaryAndAReplica(t *testing.T) {
	primary, err := Start(Config{Bin: binary(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Kill()
	replica, err := Start(Config{Bin: binary(t), Dir: t.TempDir(),
		Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())}})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Kill()
	deadline := time.Now().Add(5 * time.Second)
	if r, err := roleOf(primary.Addr(), deadline); err != nil || r.name != "master" {
		t.Errorf("ROLE of the primary: %+v, %v; want a master", r, err)
	}
	r, err := roleOf(replica.Addr(), deadline)
	if err != nil || r.name != "slave" || r.master != primary.Addr() || r.state == "" {
		t.Errorf("ROLE of the replica: %+v, %v; want a slave of %s with its link's state", r, err, primary.Addr())
	}
}

// A stopped server holds a command no longer than its deadline.
func TestACommandEndsAtItsDeadlineOnAPausedServer(t *testing.T) {
	s, err := Start(Config{Bin: binary(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = call(redis.NewClient, s.Addr(), began.Add(200*time.Millisecond), func(ctx context.Context, c *redis.Client) (string, error) {
		return c.Ping(ctx).Result()
	})
	if err == nil {
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
