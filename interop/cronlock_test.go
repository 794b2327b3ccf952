package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock"
	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/redisproc"
)

// kvz/cronlock locks cron jobs across machines with the SETNX page's
// algorithm on whole Unix seconds, in bash over /dev/tcp. Its release is
// two commands some 10–20ms apart: GETSET key <min>, then EXPIREAT key
// <min>, where <min> = its start second + grace + 1 was computed before
// its SETNX. A job that ends during second <min> therefore writes a value
// that states the current second, and then an expiry that deletes
// whatever the key holds by then. cronlock's own readers take a value
// equal to the current second as "expiring now" and keep off. A Locker
// that took the key over inside that window would lose it to the EXPIREAT
// while another client SETNXes it: two holders (issue 11, finding 12). A
// whole-seconds value is therefore held through the end of its second.

// cronlockRelease is cronlock's release, command for command: each of its
// commands is written and followed by a 10ms sleep before the reply is
// read ({ printf ...; sleep 0.01; }). between runs after the GETSET and
// before the EXPIREAT.
func cronlockRelease(t *testing.T, client *redis.Client, key string, minSecond int64, between func()) {
	t.Helper()
	send := func(args ...any) {
		t.Helper()
		cmd := client.Do(context.Background(), args...)
		time.Sleep(10 * time.Millisecond)
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}
	send("GETSET", key, minSecond)
	between()
	send("EXPIREAT", key, minSecond)
}

// The schedule of the finding, driven step by step against a real server:
// cronlock holds the key, its job ends during second <min>, it writes
// <min>; a Locker on the real clock tries the key before cronlock's
// EXPIREAT. It must be refused: the value is held through second <min>.
// Before, it took the key over, the EXPIREAT deleted it under the Locker,
// and a second Locker then acquired it: two holders, in 6 of 6 runs.
func TestATakeoverInsideCronlocksReleaseIsRefused(t *testing.T) {
	_, client := startRedis(t)
	const key = "cronlock.job"
	start := time.Now().Unix()
	minSecond := start + 0 + 1 // CRONLOCK_GRACE=0
	// cronlock's acquisition: SETNX key <start + CRONLOCK_RELEASE + 1>.
	must(t, client.Do(context.Background(), "SETNX", key, start+86400+1).Err())
	time.Sleep(time.Until(time.Unix(minSecond, 0).Add(50 * time.Millisecond))) // the job ends during second <min>

	first, second := newSecondsLocker(t, client), newSecondsLocker(t, client)
	var taken *setnxlock.Lock
	cronlockRelease(t, client, key, minSecond, func() {
		lock, err := first.TryAcquire(context.Background(), key)
		if err == nil {
			taken = lock
			return
		}
		if !errors.Is(err, setnxlock.ErrNotAcquired) {
			t.Fatal(err)
		}
	})
	if taken != nil {
		t.Fatalf("a Locker took the key over while cronlock was releasing it, with the value %d stating the current second", minSecond)
	}
	lock, err := second.TryAcquire(context.Background(), key)
	if err != nil {
		t.Fatalf("once cronlock's EXPIREAT removed the key, a Locker should get it: %v", err)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func newSecondsLocker(t *testing.T, client *redis.Client) *setnxlock.Locker {
	t.Helper()
	l, err := setnxlock.New(client, setnxlock.WithFormat(setnxlock.UnixSeconds), setnxlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// CronlockScriptEnv names the environment variable that points at a copy of
// kvz/cronlock's script (github.com/kvz/cronlock, file cronlock). It lives
// on GitHub only, which CI cannot reach, so the test of the script itself
// runs when this is set: make interop-cronlock CRONLOCK_SCRIPT=path.
const cronlockScriptEnv = "CRONLOCK_SCRIPT"

// The real cronlock script against two Lockers on the same key, round
// after round: each round's cron job ends just after a second boundary, so
// that cronlock's release writes a value stating the current second, while
// the Lockers try the key every millisecond and hold it 300ms when they
// get it. No Locker may hold the key while another does, or while the job
// runs.
func TestTheRealCronlockAndLockersNeverHoldTogether(t *testing.T) {
	script := os.Getenv(cronlockScriptEnv)
	if script == "" {
		t.Skipf("%s is not set: the script itself is on GitHub only (make interop-cronlock CRONLOCK_SCRIPT=path runs this)", cronlockScriptEnv)
	}
	srv, client := startRedis(t)
	host, port := "127.0.0.1", srv[len("127.0.0.1:"):]
	const key, rounds = "cronlock.job", 6
	type hold struct {
		who      string
		from, to time.Time
	}
	var mu sync.Mutex
	var holds []hold
	record := func(h hold) { mu.Lock(); holds = append(holds, h); mu.Unlock() }

	for round := range rounds {
		// The job: say it started, wait for the next second to begin,
		// then 30ms more, so that it ends during cronlock's <min> second.
		job := `echo started; s=$(date +%s); while [ "$(date +%s)" = "$s" ]; do sleep 0.005; done; sleep 0.03; echo ended`
		cmd := exec.Command("bash", script, "bash", "-c", job)
		cmd.Env = append(os.Environ(), "CRONLOCK_HOST="+host, "CRONLOCK_PORT="+port, "CRONLOCK_KEY=job",
			"CRONLOCK_GRACE=0", "CRONLOCK_RELEASE=60", "CRONLOCK_REDIS_TIMEOUT=5")
		redisproc.DieWithParent(cmd)
		stdout, err := cmd.StdoutPipe()
		must(t, err)
		must(t, cmd.Start())
		started, ended := make(chan time.Time, 1), make(chan time.Time, 1)
		go func() {
			out := bufio.NewReader(stdout)
			for _, mark := range []chan time.Time{started, ended} {
				line, _ := out.ReadString('\n')
				if line != "started\n" && line != "ended\n" {
					break
				}
				mark <- time.Now()
			}
			close(started)
			close(ended)
		}()
		begun, ok := <-started // bounded: the script prints or exits at once
		if !ok {
			_ = cmd.Wait() // bounded: it printed nothing and closed its output
			t.Fatalf("round %d: cronlock did not run its job", round)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var wg sync.WaitGroup
		for _, who := range []string{"a", "b"} {
			l := newSecondsLocker(t, client)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					lock, err := l.TryAcquire(ctx, key)
					if err != nil {
						time.Sleep(time.Millisecond)
						continue
					}
					from := time.Now()
					time.Sleep(300 * time.Millisecond)
					record(hold{who: fmt.Sprintf("locker %s", who), from: from, to: time.Now()})
					_ = lock.Release(context.Background())
				}
			}()
		}
		finished, ok := <-ended                   // bounded: the job ends within two seconds
		if err := cmd.Wait(); err != nil || !ok { // bounded: as above
			t.Fatalf("round %d: cronlock: %v", round, err)
		}
		record(hold{who: "cronlock's job " + strconv.Itoa(round), from: begun, to: finished})
		time.Sleep(time.Until(time.Unix(finished.Unix()+2, 0))) // the Lockers contend past cronlock's expiry
		cancel()
		await.Group(t, &wg, "round %d's Lockers", round)
		must(t, client.Del(context.Background(), key).Err())
	}
	for i, a := range holds {
		for _, b := range holds[i+1:] {
			if a.from.Before(b.to) && b.from.Before(a.to) {
				t.Errorf("%s held %v–%v while %s held %v–%v", a.who, a.from.Format("05.000"), a.to.Format("05.000"), b.who, b.from.Format("05.000"), b.to.Format("05.000"))
			}
		}
	}
	t.Logf("%d holds over %d rounds", len(holds), rounds)
}
