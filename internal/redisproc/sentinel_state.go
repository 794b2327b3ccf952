package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// What the sentinels report and whether the deployment is healthy: the
// primary they agree on, each sentinel's view of the replicas and of its
// peers, and the waits' step and sleep.

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
