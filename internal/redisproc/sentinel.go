package redisproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// A Sentinel deployment on loopback: its configuration, starting its six
// processes, and what it is made of.

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

// Kill ends every process of the deployment with SIGKILL. It may be called
// more than once.
func (d *Sentinel) Kill() {
	for _, s := range slices.Concat(d.sentinels, d.data) {
		s.Kill()
	}
}
