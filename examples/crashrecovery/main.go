// Command crashrecovery shows the SETNX page's deadlock handling as a
// timeline: a holder process takes a lock and is killed with SIGKILL inside
// its critical section, so it never releases; a waiter is refused while the
// lease is live and recovers the lock with GETSET once it has expired.
//
//	cd examples && go run ./crashrecovery          # embedded miniredis
//	cd examples && go run ./crashrecovery -addr 127.0.0.1:6379
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/examples/internal/demo"
)

const key = "lock.demo.report"

func main() {
	addr := demo.AddrFlag()
	ttl := flag.Duration("ttl", 2*time.Second, "lease length")
	holder := flag.Bool("holder", false, "internal: run as the holder process")
	flag.Parse()

	if *holder {
		runHolder(*addr, *ttl)
		return
	}
	addrToUse, where, stop := demo.Redis(*addr)
	defer stop()
	if err := run(addrToUse, where, *ttl); err != nil {
		fmt.Fprintln(os.Stderr, "crashrecovery:", err)
		stop()
		os.Exit(1)
	}
}

// runHolder is the child process: it takes the lock, reports it, and works
// until it is killed.
func runHolder(addr string, ttl time.Duration) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	locker, err := setnxlock.New(client, setnxlock.WithTTL(ttl), setnxlock.WithClassicCommands())
	if err == nil {
		var lock *setnxlock.Lock
		if lock, err = locker.TryAcquire(context.Background(), key); err == nil {
			fmt.Printf("acquired %d\n", lock.ExpiresAt().UnixMilli())
			select {} // the critical section, which never ends on its own
		}
	}
	fmt.Println("error", err)
	os.Exit(1)
}

func run(addr, where string, ttl time.Duration) error {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	if err := client.Del(ctx, key).Err(); err != nil {
		return err
	}
	fmt.Printf("setnxlock crash recovery on %s, key %s, TTL %v\n\n", where, key, ttl)
	t := newTimeline()

	// The holder: a separate process that takes the lock and is killed.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(self, "-holder", "-addr", addr, "-ttl", ttl.String())
	out, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	fields := strings.Fields(line)
	if len(fields) != 2 || fields[0] != "acquired" {
		_ = child.Process.Kill()
		return fmt.Errorf("holder failed: %q", strings.TrimSpace(line))
	}
	expiryMillis, _ := strconv.ParseInt(fields[1], 10, 64)
	t.event("holder", "pid %d: SETNX %s -> 1, lock acquired, lease ends at %s", child.Process.Pid, key, t.at(time.UnixMilli(expiryMillis)))
	_ = child.Process.Kill()
	_ = child.Wait()
	t.event("holder", "killed with SIGKILL inside its critical section: it will never release")

	// The waiter: every command it sends appears on the timeline.
	client.AddHook(t)
	waiter, err := setnxlock.New(client, setnxlock.WithTTL(ttl), setnxlock.WithClassicCommands())
	if err != nil {
		return err
	}
	if _, err := waiter.TryAcquire(ctx, key); err != nil {
		t.event("waiter", "TryAcquire: %v", err)
	}
	t.event("waiter", "Acquire: queues on the key and polls every 50ms, the last sleep cut short at the lease's end")
	ctx, cancel := context.WithTimeout(ctx, 3*ttl)
	defer cancel()
	lock, err := waiter.Acquire(ctx, key)
	if err != nil {
		return err
	}
	t.event("waiter", "lock recovered, lease ends at %s", t.at(lock.ExpiresAt()))
	if err := lock.Release(ctx); err != nil {
		return err
	}
	t.event("waiter", "released")
	return nil
}

// timeline prints events with the time since the demo started, and is a
// go-redis hook that turns the waiter's commands into events. Attempts
// refused by a live lease (the queued wait's polls) are counted rather
// than printed one by one.
type timeline struct {
	start    time.Time
	refused  int
	watching bool // the next GET is Release's read inside WATCH
}

func newTimeline() *timeline { return &timeline{start: time.Now()} }

func (t *timeline) at(instant time.Time) string {
	return fmt.Sprintf("+%.3fs", instant.Sub(t.start).Seconds())
}

func (t *timeline) event(who, format string, args ...any) {
	fmt.Printf("%9s  %-6s  %s\n", t.at(time.Now()), who, fmt.Sprintf(format, args...))
}

func (t *timeline) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *timeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		switch cmds[0].Name() {
		case "watch": // WATCH, GET (and the queue's head, on a release)
			t.watching = true
			if get, ok := cmds[1].(*redis.StringCmd); len(cmds) > 1 && ok {
				t.describe(get)
			}
			return err
		case "get": // a queued wait's poll: GET, with its place in the queue
			if get, ok := cmds[0].(*redis.StringCmd); ok {
				t.describe(get)
			}
			return err
		}
		if len(cmds) < 2 || cmds[0].Name() != "multi" {
			return err
		}
		switch cmds[1].Name() {
		case "getset":
			t.event("waiter", "MULTI GETSET EXEC -> old value still expired: the lock is ours (nobody DELs it, so no C1/C2 race)")
		case "del":
			t.event("waiter", "MULTI DEL EXEC: runs only because the key kept our value since WATCH")
		}
		return err
	}
}

func (t *timeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		switch c := cmd.(type) {
		case *redis.IntCmd:
			if c.Name() == "setnx" && c.Val() == 1 {
				t.event("waiter", "SETNX -> 1")
			}
		case *redis.StringCmd:
			t.describe(c)
		case *redis.StatusCmd:
			t.watching = cmd.Name() == "watch"
		}
		return err
	}
}

// describe reports a GET reply, judging the lease by its expiry (the number
// before the ':').
func (t *timeline) describe(cmd *redis.StringCmd) {
	name := strings.ToUpper(cmd.Name())
	value := cmd.Val()
	millis, _ := strconv.ParseInt(strings.SplitN(value, ":", 2)[0], 10, 64)
	left := time.Until(time.UnixMilli(millis)).Round(time.Millisecond)
	switch {
	case cmd.Err() != nil:
		t.event("waiter", "%s -> %v", name, cmd.Err())
	case t.watching && left <= 0:
		t.watching = false
		t.event("waiter", "WATCH %s, GET -> still the expired value", key)
	case t.watching:
		t.watching = false
		t.event("waiter", "WATCH %s, GET -> our own value", key)
	case name == "GET" && left > 0:
		if t.refused == 0 {
			t.event("waiter", "SETNX -> 0, GET -> lease live for %v more: refused", left)
		}
		t.refused++
	case name == "GET" && t.refused > 0:
		t.event("waiter", "... %d attempts refused while the lease was live", t.refused)
		t.refused = 0
		fallthrough
	case name == "GET":
		t.event("waiter", "GET -> lease expired %v ago: the holder is gone", -left)
	}
}
