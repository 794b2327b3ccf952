package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultMasterName is the name the sentinels monitor the primary under
// unless SentinelConfig.MasterName gives another.
const DefaultMasterName = "mymaster"

const (
	// sentinelQuorum is how many sentinels must agree that the primary is
	// down before one of them may fail it over: a majority of the three.
	sentinelQuorum = 2
	dataServers    = 3 // one primary and two replicas
	sentinelCount  = 3
	// pollEvery is how often the waits below look again.
	pollEvery = 25 * time.Millisecond
	// commandLimit bounds one command sent while waiting, so that a
	// stopped server cannot hold a wait past its deadline for long.
	commandLimit = time.Second
)

// ErrNoSentinel means Redis Sentinel cannot be run: neither redis-sentinel
// nor redis-server was found.
var ErrNoSentinel = errors.New("redisproc: cannot run Redis Sentinel: neither redis-sentinel nor redis-server found (install one, e.g. apt-get install redis-sentinel, or set " + BinaryEnv + ")")

// SentinelBinary returns how to run Redis Sentinel: a program, and the
// arguments that make it a sentinel. redis-sentinel on the PATH (Debian's
// package) runs as it is; otherwise redis-server (see Binary) runs with
// --sentinel. Both are the same program: redis-sentinel is a link to
// redis-server, which is a sentinel when called by that name or given
// --sentinel. When $REDIS_SERVER_BIN is set, that binary is the sentinel
// too, so that sentinels and data servers are never different versions.
func SentinelBinary() (bin string, args []string, err error) {
	if os.Getenv(BinaryEnv) == "" {
		if path, err := exec.LookPath("redis-sentinel"); err == nil {
			return path, nil, nil
		}
	}
	bin, err = Binary()
	if err != nil {
		return "", nil, ErrNoSentinel
	}
	return bin, []string{"--sentinel"}, nil
}

// SentinelConfig describes a Sentinel deployment to start. Only Dir is
// required; every zero field takes its default.
type SentinelConfig struct {
	// Bin is redis-server, for the data servers; "" finds it with Binary.
	Bin string
	// SentinelBin and SentinelArgs run a sentinel (the arguments come
	// after the config file, before the options); an empty SentinelBin
	// finds both with SentinelBinary.
	SentinelBin  string
	SentinelArgs []string
	// Dir holds one subdirectory per process (data1..data3,
	// sentinel1..sentinel3), each with its log; a sentinel's holds the
	// config file it rewrites.
	Dir string
	// MasterName is the name the sentinels monitor the primary under
	// (default DefaultMasterName); letters, digits, '.', '_' and '-'.
	MasterName string
	// DownAfter is down-after-milliseconds: how long the primary must fail
	// to answer before a sentinel thinks it down (default 1.5s). Keep it
	// well above 1s. After a failover each sentinel opens a new link to
	// the new primary, and it reconnects at most once a second; with a
	// shorter DownAfter every sentinel marks the new primary down before
	// it has reached it, and since the peers' votes that the old primary
	// was down still count for 5s, at once objectively down: it is failed
	// over again. At 0.5s the primary was seen to flip between the two
	// replicas four more times within five seconds of the first failover.
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout (default 2s): how long a
	// failover may take, and half the pause before a sentinel retries a
	// failed one.
	FailoverTimeout time.Duration
	// Ready bounds each wait for the deployment to become healthy: in
	// StartSentinel, Restart and Resume (default 20s).
	Ready time.Duration
}

// masterNameRE keeps the master name a single word in the config file.
var masterNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Sentinel is a Redis Sentinel deployment on loopback: one primary, two
// replicas and three sentinels (quorum 2), each a process of its own on a
// free port, all dying with the process that started them. The sentinels
// are the authority on which data server is the primary; everything that
// names "the primary" here asks them.
//
// Its methods are safe for concurrent use; the sets of processes are fixed
// at start, only their states change.
type Sentinel struct {
	cfg       SentinelConfig
	data      []*Server // in start order: data[0] was the first primary
	sentinels []*Server
}

// StartSentinel starts a deployment and returns once it is healthy (see
// WaitHealthy): both replicas in sync with the primary, and every sentinel
// agreeing on the primary and knowing both replicas and both other
// sentinels. That takes a few seconds, mostly the sentinels' hello messages
// (every 2s). It needs Redis 5 or later (REPLICAOF, SENTINEL REPLICAS).
//
// Everything reports 127.0.0.1: the servers bind it alone, the primary
// learns its replicas' addresses from their connections, and the sentinels
// announce it to one another (announce-ip).
func StartSentinel(cfg SentinelConfig) (*Sentinel, error) {
	if cfg.Dir == "" {
		return nil, errors.New("redisproc: SentinelConfig.Dir is required")
	}
	if cfg.DownAfter < 0 || cfg.FailoverTimeout < 0 || cfg.Ready < 0 {
		return nil, fmt.Errorf("redisproc: negative duration in %+v", cfg)
	}
	var err error
	if cfg.Bin == "" {
		if cfg.Bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	if cfg.SentinelBin == "" {
		if cfg.SentinelBin, cfg.SentinelArgs, err = SentinelBinary(); err != nil {
			return nil, err
		}
	}
	if cfg.MasterName == "" {
		cfg.MasterName = DefaultMasterName
	}
	if !masterNameRE.MatchString(cfg.MasterName) {
		return nil, fmt.Errorf("redisproc: master name %q: only letters, digits, '.', '_' and '-'", cfg.MasterName)
	}
	cfg.DownAfter = orDefault(cfg.DownAfter, 1500*time.Millisecond)
	cfg.FailoverTimeout = orDefault(cfg.FailoverTimeout, 2*time.Second)
	cfg.Ready = orDefault(cfg.Ready, 20*time.Second)

	d := &Sentinel{cfg: cfg}
	if err := d.start(); err != nil {
		d.Kill()
		return nil, err
	}
	return d, nil
}

// orDefault returns v, or def when v is zero.
func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// start launches the data servers, then the sentinels, then waits for the
// deployment to become healthy. What it started is in d, for Kill.
func (d *Sentinel) start() error {
	// Diskless full syncs start at once instead of after Redis 7's default
	// five-second wait for more replicas.
	dataArgs := []string{"--protected-mode", "no", "--repl-diskless-sync-delay", "0"}
	for i := range dataServers {
		args := dataArgs
		if i > 0 {
			args = slices.Concat(dataArgs, []string{"--replicaof", "127.0.0.1", strconv.Itoa(d.data[0].Port())})
		}
		s, err := d.startProcess(fmt.Sprintf("data%d", i+1), Config{Bin: d.cfg.Bin, Args: args})
		if err != nil {
			return err
		}
		d.data = append(d.data, s)
	}
	for i := range sentinelCount {
		name := fmt.Sprintf("sentinel%d", i+1)
		conf := filepath.Join(d.cfg.Dir, name, "sentinel.conf")
		s, err := d.startProcess(name, Config{
			Bin:        d.cfg.SentinelBin,
			ConfigFile: conf,
			Args:       slices.Concat(d.cfg.SentinelArgs, []string{"--protected-mode", "no"}),
		}, func() error { return os.WriteFile(conf, []byte(d.sentinelConf()), 0o644) })
		if err != nil {
			return err
		}
		d.sentinels = append(d.sentinels, s)
	}
	return d.WaitHealthy(d.cfg.Ready)
}

// startProcess makes the process's directory, runs prepare, and starts it.
func (d *Sentinel) startProcess(name string, cfg Config, prepare ...func() error) (*Server, error) {
	cfg.Dir = filepath.Join(d.cfg.Dir, name)
	cfg.Ready = d.cfg.Ready
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	for _, p := range prepare {
		if err := p(); err != nil {
			return nil, fmt.Errorf("redisproc: %s: %w", name, err)
		}
	}
	s, err := Start(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, name)
	}
	return s, nil
}

// sentinelConf is a sentinel's initial config file. The sentinel rewrites
// it as it learns the deployment (its id, the replicas, its peers, the
// epochs), which is why each sentinel needs a writable file of its own.
// The sentinel's port, bind address, dir and log file come from the
// command line, which overrides the file.
func (d *Sentinel) sentinelConf() string {
	name := d.cfg.MasterName
	return fmt.Sprintf(`# Written by redisproc; the sentinel rewrites it.
sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d
sentinel down-after-milliseconds %[1]s %[4]d
sentinel failover-timeout %[1]s %[5]d
sentinel parallel-syncs %[1]s 1
sentinel announce-ip 127.0.0.1
`, name, d.data[0].Port(), sentinelQuorum, d.cfg.DownAfter.Milliseconds(), d.cfg.FailoverTimeout.Milliseconds())
}

// MasterName returns the name the sentinels monitor the primary under, as
// a client's FailoverOptions.MasterName needs it.
func (d *Sentinel) MasterName() string { return d.cfg.MasterName }

// SentinelAddrs returns the sentinels' host:port addresses.
func (d *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(d.sentinels))
	for i, s := range d.sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Sentinels returns the sentinel processes, to kill or pause one.
func (d *Sentinel) Sentinels() []*Server { return slices.Clone(d.sentinels) }

// Servers returns the three data servers in the order they were started:
// the first was the primary at start. Which is the primary now, Primary
// says.
func (d *Sentinel) Servers() []*Server { return slices.Clone(d.data) }

// Primary returns the data server that every running sentinel reports
// (SENTINEL GET-MASTER-ADDR-BY-NAME) as the primary. It fails when they
// disagree, as they do for a moment during a failover, or when a running
// sentinel does not answer (a paused one never does). The primary itself
// may be dead or paused: the sentinels report it until they fail it over.
func (d *Sentinel) Primary() (*Server, error) {
	p, err := d.primary(time.Now().Add(commandLimit))
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	return p, nil
}

// Replicas returns the data servers other than Primary, in start order,
// whether they run or not.
func (d *Sentinel) Replicas() ([]*Server, error) {
	p, err := d.Primary()
	if err != nil {
		return nil, err
	}
	var replicas []*Server
	for _, s := range d.data {
		if s != p {
			replicas = append(replicas, s)
		}
	}
	return replicas, nil
}

// KillPrimary ends the current primary with SIGKILL, as a crash would, and
// returns it. The sentinels notice after DownAfter and fail it over; see
// WaitForPromotion, then Restart to bring it back.
func (d *Sentinel) KillPrimary() (*Server, error) {
	p, err := d.Primary()
	if err != nil {
		return nil, err
	}
	p.Kill()
	return p, nil
}

// PausePrimary stops the current primary with SIGSTOP and returns it:
// clients' connections stay open and unanswered, and the sentinels fail
// it over after DownAfter. See WaitForPromotion, then Resume.
func (d *Sentinel) PausePrimary() (*Server, error) {
	p, err := d.Primary()
	if err != nil {
		return nil, err
	}
	return p, p.Pause()
}

// WaitForPromotion waits until every running sentinel reports the same
// primary, other than old (a host:port), and that server answers ROLE as a
// master. It returns the new primary and how long the wait took: called
// right after KillPrimary or PausePrimary, that is the time from the fault
// to a promotion every client can see, whichever sentinel it asks.
//
// Every running sentinel, not a quorum, because a client asks whichever
// sentinel answers first: with a quorum, a client could still be sent to
// old. The failover itself may not be over yet (the leader may still be
// moving the other replica over, and the old primary, when it comes back,
// is not yet a replica); WaitHealthy waits for that.
func (d *Sentinel) WaitForPromotion(old string, timeout time.Duration) (*Server, time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		var notYet string
		p, err := d.primary(step(deadline))
		switch {
		case err != nil:
			notYet = err.Error()
		case p.Addr() == old:
			notYet = "every sentinel still reports " + old
		default:
			r, err := roleOf(p.Addr(), step(deadline))
			switch {
			case err != nil:
				notYet = fmt.Sprintf("the sentinels report %s, which does not answer ROLE: %v", p.Addr(), err)
			case r.name != "master":
				notYet = fmt.Sprintf("the sentinels report %s, which is still a %s", p.Addr(), r.name)
			default:
				return p, time.Since(start), nil
			}
		}
		if !time.Now().Before(deadline) {
			return nil, time.Since(start), fmt.Errorf("redisproc: no primary other than %s within %v: %s (sentinel logs: %s)",
				old, timeout, notYet, d.sentinelLogs())
		}
		sleep(pollEvery, deadline)
	}
}

// WaitHealthy waits until the deployment is healthy, leaving out the
// processes that are not running (killed and not restarted):
//   - every running sentinel reports the same primary, and sees it up and
//     not being failed over (flags "master");
//   - that server answers ROLE as a master, and every other running data
//     server as its replica with the link up;
//   - every running sentinel lists each of those replicas, and each other
//     running sentinel, as up (no s_down, o_down or disconnected flag).
//
// After a failover this holds once the failover is over on every sentinel.
// A paused process counts as running, so the deployment is not healthy
// while one is paused.
func (d *Sentinel) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		notYet := d.unhealthy(deadline)
		if notYet == "" {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("redisproc: the sentinel deployment is not healthy within %v: %s (logs: %s)",
				timeout, notYet, d.logs())
		}
		sleep(2*pollEvery, deadline)
	}
}

// Restart brings a data server back (killing it first if it runs) and
// waits, up to SentinelConfig.Ready, for the deployment to become healthy
// with it. Unless the sentinels still report it as the primary (no
// failover happened: then it comes back as the primary, empty, since
// persistence is off, and the replicas resync from it), it is made a
// replica of the current primary at once, as an operator would.
//
// The sentinels would do that too, but only about 8s after it reappears
// (four of their 2s publish periods), and meanwhile it would be a second,
// empty primary: that is what a bare s.Restart() gives, for tests that
// want it. Call Restart after WaitForPromotion, not during a failover.
func (d *Sentinel) Restart(s *Server) error {
	if !slices.Contains(d.data, s) {
		return errors.New("redisproc: Restart: not a data server of this deployment")
	}
	p, err := d.Primary()
	if err != nil {
		return err
	}
	if err := s.Restart(); err != nil {
		return err
	}
	return d.rejoin(s, p)
}

// Resume continues a paused data server (SIGCONT) and, unless the
// sentinels still report it as the primary, makes it a replica of the
// current primary at once, then waits, up to SentinelConfig.Ready, for the
// deployment to become healthy. Commands it received while stopped run
// first, while it is still a primary: a real resumed primary does the
// same, for longer. A bare s.Resume() leaves it a second primary until the
// sentinels demote it, about 8s later (see Restart).
func (d *Sentinel) Resume(s *Server) error {
	if !slices.Contains(d.data, s) {
		return errors.New("redisproc: Resume: not a data server of this deployment")
	}
	p, err := d.Primary()
	if err != nil {
		return err
	}
	if err := s.Resume(); err != nil {
		return err
	}
	return d.rejoin(s, p)
}

// rejoin makes s a replica of p unless it is p, and waits for health.
func (d *Sentinel) rejoin(s, p *Server) error {
	if s != p {
		_, err := call(redis.NewClient, s.Addr(), time.Now().Add(d.cfg.Ready), func(ctx context.Context, c *redis.Client) (string, error) {
			return c.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(p.Port())).Result()
		})
		if err != nil {
			return fmt.Errorf("redisproc: REPLICAOF %s on %s: %w", p.Addr(), s.Addr(), err)
		}
	}
	return d.WaitHealthy(d.cfg.Ready)
}

// Kill ends every process of the deployment with SIGKILL. It may be called
// more than once.
func (d *Sentinel) Kill() {
	for _, s := range slices.Concat(d.sentinels, d.data) {
		s.Kill()
	}
}

// primary asks every running sentinel for the primary's address; they
// must all answer and agree, and it must be one of the data servers. Its
// errors lack the package prefix: they end up inside others.
func (d *Sentinel) primary(deadline time.Time) (*Server, error) {
	var addr string
	var reports []string
	agree := true
	for _, s := range d.sentinels {
		if !s.Running() {
			continue
		}
		a, err := d.masterAddr(s, deadline)
		if err != nil {
			return nil, fmt.Errorf("sentinel %s: %w", s.Addr(), err)
		}
		reports = append(reports, s.Addr()+" reports "+a)
		if addr == "" {
			addr = a
		}
		agree = agree && a == addr
	}
	if addr == "" {
		return nil, errors.New("no sentinel is running")
	}
	if !agree {
		return nil, fmt.Errorf("the sentinels disagree on the primary (failing over?): %s", strings.Join(reports, ", "))
	}
	for _, s := range d.data {
		if s.Addr() == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("the sentinels report %s as the primary, which is none of the data servers", addr)
}

// masterAddr asks one sentinel for the primary's host:port.
func (d *Sentinel) masterAddr(s *Server, deadline time.Time) (string, error) {
	hostPort, err := call(redis.NewSentinelClient, s.Addr(), deadline, func(ctx context.Context, c *redis.SentinelClient) ([]string, error) {
		return c.GetMasterAddrByName(ctx, d.cfg.MasterName).Result()
	})
	if err != nil {
		return "", err
	}
	if len(hostPort) != 2 {
		return "", fmt.Errorf("GET-MASTER-ADDR-BY-NAME %s: unexpected reply %v", d.cfg.MasterName, hostPort)
	}
	return net.JoinHostPort(hostPort[0], hostPort[1]), nil
}

// unhealthy returns what keeps the deployment from being healthy (see
// WaitHealthy), or "" when nothing does.
func (d *Sentinel) unhealthy(deadline time.Time) string {
	p, err := d.primary(step(deadline))
	if err != nil {
		return err.Error()
	}
	if r, err := roleOf(p.Addr(), step(deadline)); err != nil {
		return fmt.Sprintf("primary %s: ROLE: %v", p.Addr(), err)
	} else if r.name != "master" {
		return fmt.Sprintf("%s, the sentinels' primary, is a %s", p.Addr(), r.name)
	}
	var replicas []*Server
	for _, s := range d.data {
		if s != p && s.Running() {
			replicas = append(replicas, s)
		}
	}
	for _, s := range replicas {
		r, err := roleOf(s.Addr(), step(deadline))
		if err != nil {
			return fmt.Sprintf("replica %s: ROLE: %v", s.Addr(), err)
		}
		if r.name != "slave" || r.master != p.Addr() || r.state != "connected" {
			return fmt.Sprintf("%s is not a replica of %s in sync yet (ROLE: %s of %q, link %q)", s.Addr(), p.Addr(), r.name, r.master, r.state)
		}
	}
	for _, s := range d.sentinels {
		if !s.Running() {
			continue
		}
		if notYet := d.sentinelUnhealthy(s, replicas, deadline); notYet != "" {
			return "sentinel " + s.Addr() + " " + notYet
		}
	}
	return ""
}

// sentinelUnhealthy returns what one sentinel does not see as healthy yet,
// or "".
func (d *Sentinel) sentinelUnhealthy(s *Server, replicas []*Server, deadline time.Time) string {
	name := d.cfg.MasterName
	master, err := call(redis.NewSentinelClient, s.Addr(), step(deadline), func(ctx context.Context, c *redis.SentinelClient) (map[string]string, error) {
		return c.Master(ctx, name).Result()
	})
	if err != nil {
		return fmt.Sprintf("SENTINEL MASTER: %v", err)
	}
	if master["flags"] != "master" {
		return fmt.Sprintf("sees the primary %s:%s as %q", master["ip"], master["port"], master["flags"])
	}
	known, err := call(redis.NewSentinelClient, s.Addr(), step(deadline), func(ctx context.Context, c *redis.SentinelClient) ([]map[string]string, error) {
		return c.Replicas(ctx, name).Result()
	})
	if err != nil {
		return fmt.Sprintf("SENTINEL REPLICAS: %v", err)
	}
	if notYet := seesUp(known, replicas, "slave"); notYet != "" {
		return notYet
	}
	known, err = call(redis.NewSentinelClient, s.Addr(), step(deadline), func(ctx context.Context, c *redis.SentinelClient) ([]map[string]string, error) {
		return c.Sentinels(ctx, name).Result()
	})
	if err != nil {
		return fmt.Sprintf("SENTINEL SENTINELS: %v", err)
	}
	var peers []*Server
	for _, p := range d.sentinels {
		if p != s && p.Running() {
			peers = append(peers, p)
		}
	}
	return seesUp(known, peers, "sentinel")
}

// seesUp checks that every one of want is among known (a sentinel's list
// of replicas or of sentinels) as a role ("slave", "sentinel") that is up:
// no s_down, o_down or disconnected flag. Other flags are memories, not
// faults: a peer keeps master_down, its last vote that the old primary was
// down, for 5s after a failover (Sentinel forgets votes older than five
// of its 1s ask periods).
func seesUp(known []map[string]string, want []*Server, role string) string {
	byAddr := map[string]map[string]string{}
	for _, k := range known {
		byAddr[k["ip"]+":"+k["port"]] = k
	}
	for _, w := range want {
		k, ok := byAddr[w.Addr()]
		if !ok {
			return fmt.Sprintf("does not know %s %s yet", role, w.Addr())
		}
		flags := strings.Split(k["flags"], ",")
		if !slices.Contains(flags, role) || slices.ContainsFunc(flags, func(f string) bool {
			return f == "s_down" || f == "o_down" || f == "disconnected"
		}) {
			return fmt.Sprintf("sees %s %s as %q", role, w.Addr(), k["flags"])
		}
	}
	return ""
}

// logs returns the tails of every process's log, for error messages.
func (d *Sentinel) logs() string {
	var tails []string
	for _, s := range slices.Concat(d.data, d.sentinels) {
		tails = append(tails, filepath.Base(s.cfg.Dir)+" "+s.Addr()+": "+s.LogTail())
	}
	return strings.Join(tails, "; ")
}

// sentinelLogs returns the tails of the sentinels' logs, which say how far
// a failover got (+sdown, +odown, +try-failover, +elected-leader, ...).
func (d *Sentinel) sentinelLogs() string {
	var tails []string
	for _, s := range d.sentinels {
		tails = append(tails, s.Addr()+": "+s.LogTail())
	}
	return strings.Join(tails, "; ")
}

// step bounds one command of a wait: commandLimit, or less near deadline.
func step(deadline time.Time) time.Time {
	if limit := time.Now().Add(commandLimit); limit.Before(deadline) {
		return limit
	}
	return deadline
}

// sleep waits d, or until deadline if that comes first.
func sleep(d time.Duration, deadline time.Time) {
	time.Sleep(min(d, max(0, time.Until(deadline))))
}
