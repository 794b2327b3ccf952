package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/setnxlock/setnxlock/internal/redisproc"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Cluster is a Redis Cluster of masters without replicas, each a
// redis-server process owned by a test, on loopback. It is stopped when the
// test ends.
type Cluster struct {
	nodes []*Server
}

// StartCluster launches masters cluster-enabled redis-servers with
// persistence off, splits the 16384 slots between them in equal ranges, joins
// them with CLUSTER MEET and waits until every node reports
// cluster_state:ok and knows every other node. Redis holds a restarted
// master's cluster state at "fail" for about two seconds after it starts,
// so this takes a little over two seconds: share one cluster between the
// scenarios of a package.
//
// It needs only redis-server, not redis-cli, and only commands that Redis
// has had since Cluster began (each node's bus port is the default, its
// client port + 10000).
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	if masters < 1 {
		tb.Fatalf("redistest: a cluster needs at least one master, not %d", masters)
	}
	bin := Binary(tb)
	c := &Cluster{}
	for range masters {
		c.nodes = append(c.nodes, startClusterNode(tb, bin))
	}
	if err := c.create(); err != nil {
		tb.Fatalf("redistest: cannot create the cluster: %v (%s)", err, c.logTails())
	}
	if err := c.awaitOK(10 * time.Second); err != nil {
		tb.Fatalf("redistest: %v (%s)", err, c.logTails())
	}
	return c
}

// startClusterNode starts one cluster-enabled node on a port whose cluster
// bus port (+10000) is free too. Its nodes.conf lives in the node's own
// directory, so a Restart brings the node back with its slots.
func startClusterNode(tb testing.TB, bin string) *Server {
	tb.Helper()
	return start(tb, redisproc.Config{Bin: bin, Dir: tb.TempDir(), ClusterBus: true, Args: []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000",
	}})
}

// create gives each node an equal range of slots and a distinct config
// epoch, then introduces every node to the first.
func (c *Cluster) create() error {
	for i, n := range c.nodes {
		first, last := i*clusterSlots/len(c.nodes), (i+1)*clusterSlots/len(c.nodes)-1
		args := []any{"CLUSTER", "ADDSLOTS"} // ADDSLOTSRANGE would need Redis 7
		for slot := first; slot <= last; slot++ {
			args = append(args, slot)
		}
		if _, err := command(n.Addr(), args...); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTS %d-%d: %w", n.Addr(), first, last, err)
		}
		if _, err := command(n.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", n.Addr(), err)
		}
	}
	for _, n := range c.nodes[1:] {
		if _, err := command(c.nodes[0].Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.Port())); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", n.Addr(), err)
		}
	}
	return nil
}

// awaitOK waits until every node sees a healthy cluster of all the nodes.
func (c *Cluster) awaitOK(limit time.Duration) error {
	want := []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:" + strconv.Itoa(len(c.nodes))}
	deadline := time.Now().Add(limit)
	for {
		var notYet string
		for _, n := range c.nodes {
			info, err := command(n.Addr(), "CLUSTER", "INFO")
			if err != nil {
				notYet = fmt.Sprintf("%s: CLUSTER INFO: %v", n.Addr(), err)
				break
			}
			if missing := missingLines(info, want); missing != "" {
				notYet = fmt.Sprintf("%s has no %s yet", n.Addr(), missing)
				break
			}
		}
		if notYet == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster is not ok within %v: %s", limit, notYet)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func missingLines(info string, want []string) string {
	lines := map[string]bool{}
	for _, line := range strings.Split(info, "\n") {
		lines[strings.TrimSpace(line)] = true
	}
	for _, w := range want {
		if !lines[w] {
			return w
		}
	}
	return ""
}

// Addrs returns every node's host:port, in the order of their slot ranges.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the node processes, in the order of their slot ranges, to
// kill, pause or restart one of them.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

func (c *Cluster) logTails() string {
	tails := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		tails[i] = n.Addr() + ": " + n.LogTail()
	}
	return strings.Join(tails, "; ")
}

// command sends one command to a node and returns its reply as text.
func command(addr string, args ...any) (string, error) {
	reply, err := redisproc.Do(addr, time.Now().Add(5*time.Second), args...)
	if err != nil {
		return "", err
	}
	return fmt.Sprint(reply), nil
}
