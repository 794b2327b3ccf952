package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/setnxlock/setnxlock/internal/faultproxy"
	"github.com/setnxlock/setnxlock/internal/redisproc"
)

// backend is the run's Redis: one redis-server, or a Cluster of masters,
// each node behind a fault proxy of its own. Clients reach the nodes only
// through the proxies; the harness's own commands (faults, checks) go to
// the nodes directly.
type backend struct {
	nodes   []*redisproc.Server
	proxies []*faultproxy.Proxy // every proxy: one per node, then those of bySlot
	cluster bool
	// bySlot, in the partition mode, is the proxy of each client slot in
	// front of the one server, so that one client can be cut off while
	// the others reach Redis.
	bySlot []*faultproxy.Proxy
}

// clusterMasters is the size of the Cluster of the cluster mode.
const clusterMasters = 3

// aclPassword is the password of the clients' ACL users on the harness's
// throwaway servers.
const aclPassword = "chaos-run"

// aclUsers is the ACL file of a single-server run: the harness as the
// default user; UserChaos, allowed everything until the harness revokes
// part of it; UserPoller, never allowed pub/sub, so its Lockers poll.
var aclUsers = strings.Join([]string{
	"user default on nopass ~* &* +@all",
	"user " + UserChaos + " on >" + aclPassword + " ~* &* +@all",
	"user " + UserPoller + " on >" + aclPassword + " ~* resetchannels +@all -@pubsub",
}, "\n") + "\n"

// redisBinary finds redis-server as every launcher of the project does.
func redisBinary() (string, error) { return redisproc.Binary() }

// startBackend starts the servers of a run in dir, with its persistence
// (appendonly yes, appendfsync always, so that a restart loses no
// acknowledged write: the README's assumption), and the proxies in front
// of them.
func startBackend(dir string, cfg Config) (*backend, error) {
	bin, err := redisBinary()
	if err != nil {
		return nil, err
	}
	b := &backend{cluster: cfg.Mode == ModeCluster}
	appendonly := "no"
	if cfg.Persistence {
		appendonly = "yes"
	}
	args := []string{"--appendonly", appendonly, "--appendfsync", "always", "--maxmemory-policy", "noeviction"}
	count := 1
	if b.cluster {
		count = clusterMasters
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
	}
	for i := range count {
		if err := b.startNode(dir, i, bin, args, cfg); err != nil {
			b.close()
			return nil, err
		}
	}
	if b.cluster {
		if err := b.formCluster(); err != nil {
			b.close()
			return nil, err
		}
	}
	if cfg.Mode == ModePartition {
		for slot := range cfg.Goroutines + cfg.Procs {
			network := cfg.Network
			network.Seed = cfg.Seed + uint64(count+slot)
			proxy, err := faultproxy.New(b.nodes[0].Addr(), network)
			if err != nil {
				b.close()
				return nil, err
			}
			b.proxies, b.bySlot = append(b.proxies, proxy), append(b.bySlot, proxy)
		}
	}
	return b, nil
}

// startNode starts the i-th redis-server of the backend, in a directory of
// its own below dir (with the ACL file, on a single server), and the fault
// proxy in front of it. On an error the caller closes the backend.
func (b *backend) startNode(dir string, i int, bin string, args []string, cfg Config) error {
	nodeDir := filepath.Join(dir, "redis"+strconv.Itoa(i))
	if err := os.Mkdir(nodeDir, 0o700); err != nil {
		return err
	}
	nodeArgs := args
	if !b.cluster {
		acl := filepath.Join(nodeDir, "users.acl")
		if err := os.WriteFile(acl, []byte(aclUsers), 0o600); err != nil {
			return err
		}
		nodeArgs = append(nodeArgs, "--aclfile", acl)
	}
	node, err := redisproc.Start(redisproc.Config{Bin: bin, Dir: nodeDir, ClusterBus: b.cluster, Args: nodeArgs})
	if err != nil {
		return err
	}
	b.nodes = append(b.nodes, node)
	network := cfg.Network
	network.Seed = cfg.Seed + uint64(i)
	proxy, err := faultproxy.New(node.Addr(), network)
	if err != nil {
		return err
	}
	b.proxies = append(b.proxies, proxy)
	return nil
}

// formCluster splits the slots between the nodes in equal ranges, gives
// each a distinct config epoch, introduces them to the first and waits
// until every node sees a healthy cluster of all of them.
func (b *backend) formCluster() error {
	const slots = 16384
	for i, n := range b.nodes {
		first, last := i*slots/len(b.nodes), (i+1)*slots/len(b.nodes)-1
		if err := command(n.Addr(), "cluster", "addslotsrange", first, last); err != nil {
			return err
		}
		if err := command(n.Addr(), "cluster", "set-config-epoch", i+1); err != nil {
			return err
		}
	}
	for _, n := range b.nodes[1:] {
		if err := command(b.nodes[0].Addr(), "cluster", "meet", "127.0.0.1", n.Port()); err != nil {
			return err
		}
	}
	return b.awaitCluster(15 * time.Second)
}

// awaitCluster waits until every node reports cluster_state:ok and knows
// every other node.
func (b *backend) awaitCluster(limit time.Duration) error {
	want := []string{"cluster_state:ok", "cluster_known_nodes:" + strconv.Itoa(len(b.nodes))}
	deadline := time.Now().Add(limit)
	for {
		missing := ""
		for _, n := range b.nodes {
			info, err := reply(n.Addr(), "cluster", "info")
			for _, w := range want {
				if err == nil && !strings.Contains(info, w) {
					missing = n.Addr() + " has no " + w
				}
			}
			if err != nil {
				missing = err.Error()
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: the cluster is not ok within %v: %s", limit, missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clientAddrs is what the client of a slot dials: the proxy (its own in
// the partition mode), or for a Cluster each node with its proxy as
// "node>proxy".
func (b *backend) clientAddrs(slot int) []string {
	if slot >= 0 && slot < len(b.bySlot) {
		return []string{b.bySlot[slot].Addr()}
	}
	return b.nodeAddrs()
}

// nodeAddrs is what a client dials that has no proxy of its own: the
// node's proxy, or for a Cluster each node with its proxy as "node>proxy".
func (b *backend) nodeAddrs() []string {
	if !b.cluster {
		return []string{b.proxies[0].Addr()}
	}
	out := make([]string, len(b.nodes))
	for i, n := range b.nodes {
		out[i] = n.Addr() + ">" + b.proxies[i].Addr()
	}
	return out
}

// cutPair splits "node>proxy".
func cutPair(pair string) (node, proxy string, ok bool) { return strings.Cut(pair, ">") }

// restart kills one node (drawn from rng) with SIGKILL, as a crash would,
// and starts it again on the same port and data directory. It returns
// once the node answers again (for a Cluster, once the cluster is healthy
// again) and the interval it was down.
func (b *backend) restart(rng *rand.Rand) (Interval, error) {
	node := b.nodes[rng.IntN(len(b.nodes))]
	down := Interval{From: time.Now()}
	err := node.Restart()
	if err == nil && b.cluster {
		err = b.awaitCluster(15 * time.Second)
	}
	down.To = time.Now()
	return down, err
}

// everyNode sends a command to every node directly, ignoring errors: a
// node may be restarting.
func (b *backend) everyNode(args ...any) {
	for _, n := range b.nodes {
		_ = command(n.Addr(), args...)
	}
}

// setNetworkFaults replaces every proxy's random faults.
func (b *backend) setNetworkFaults(f faultproxy.Faults) {
	for i, p := range b.proxies {
		f.Seed += uint64(i)
		_ = p.SetFaults(f)
	}
}

// loseRepliesTo sets every proxy's argument rule.
func (b *backend) loseRepliesTo(rule func(args []string) bool) {
	for _, p := range b.proxies {
		p.LoseRepliesTo(rule)
	}
}

// holdRequestsTo sets every proxy's holding rule.
func (b *backend) holdRequestsTo(rule func(args []string) time.Duration) {
	for _, p := range b.proxies {
		p.HoldRequestsTo(rule)
	}
}

// stats adds up the proxies' counts.
func (b *backend) stats() faultproxy.Stats {
	var s faultproxy.Stats
	for _, p := range b.proxies {
		ps := p.Stats()
		s.Delayed, s.Lost, s.Cut = s.Delayed+ps.Delayed, s.Lost+ps.Lost, s.Cut+ps.Cut
		s.Held, s.Overtaken = s.Held+ps.Held, s.Overtaken+ps.Overtaken
	}
	return s
}

// close stops the proxies and kills the servers; again, it does nothing.
func (b *backend) close() {
	for _, p := range b.proxies {
		p.Close()
	}
	for _, n := range b.nodes {
		n.Kill()
	}
	b.proxies, b.nodes, b.bySlot = nil, nil, nil
}

// command sends one command to one server directly and returns its error.
func command(addr string, args ...any) error {
	_, err := reply(addr, args...)
	return err
}

// reply sends one command to one server directly and returns its reply as
// text.
func reply(addr string, args ...any) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.Do(ctx, args...).Result()
	if err != nil {
		return "", fmt.Errorf("chaos: %s: %v: %w", addr, args, err)
	}
	return fmt.Sprint(v), nil
}
