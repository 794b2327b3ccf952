package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The run's lock clients: goroutine clients and client processes, started
// incarnation after incarnation, their names, and the hooks through which
// the resource injects faults into them.

// workerConfig is the configuration of one client incarnation.
func (h *harness) workerConfig(name string, slot int) WorkerConfig {
	retries := 0 // go-redis's default: three retries after a network error
	if slot%2 == 1 {
		retries = -1 // none: the library alone deals with every failed round trip
	}
	c := h.cfg
	return WorkerConfig{
		Name: name, Redis: h.servers.clientAddrs(slot), Cluster: h.servers.cluster, Password: aclPassword,
		Resource: h.socket, Keys: c.lockKeys(), Seed: c.Seed, Offset: offsetFor(c.Seed, name, c.Skew),
		Locker: lockerFor(c.Mode, slot), Loops: c.Loops, TTL: c.TTL, Margin: c.Margin,
		MinBackoff: c.MinBackoff, MaxBackoff: c.MaxBackoff, ReadTimeout: c.ReadTimeout,
		MaxRetries: retries, LongHoldRate: c.LongHoldRate,
		CancelRate: c.CancelRate, HandoffCancelRate: c.HandoffCancelRate, CloseEvery: c.CloseEvery,
		Claims: c.Claims,
	}
}

// goroutineClient runs incarnation after incarnation of one goroutine
// client: a crash ends one and the next starts afresh, with a new Locker.
func (h *harness) goroutineClient(ctx context.Context, slot int) {
	defer h.wg.Done()
	for inc := 0; ctx.Err() == nil; inc++ {
		err := RunWorker(ctx, h.workerConfig(fmt.Sprintf("g%d.%d", slot, inc), slot))
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errCrashed):
		case HungUp(err) && h.isStopping():
			return
		case err != nil:
			h.fail(fmt.Errorf("chaos: goroutine client g%d.%d: %w", slot, inc, err))
			return
		}
	}
}

// processClient runs process after process for one client slot: the
// harness kills them; a process that exits on its own is a failure.
func (h *harness) processClient(slot int) {
	defer h.wg.Done()
	for inc := 0; ; inc++ {
		name := fmt.Sprintf("p%d.%d", slot, inc)
		h.mu.Lock() // registered before it can say hello
		if h.stopping {
			h.mu.Unlock()
			return
		}
		p, err := startProc(h.cfg.ClientBinary, h.workerConfig(name, h.cfg.Goroutines+slot))
		if err == nil {
			h.procs[name] = p
		}
		h.mu.Unlock()
		if err != nil {
			h.fail(fmt.Errorf("chaos: start client %s: %w", name, err))
			return
		}
		<-p.exited // bounded: the harness kills every process at the latest when the run stops
		h.rec.killed(name, time.Now())
		h.mu.Lock()
		delete(h.procs, name)
		stopping := h.stopping
		h.mu.Unlock()
		if stopping {
			return
		}
		if err := p.unexpectedExit(); err != nil {
			h.fail(fmt.Errorf("chaos: client %s exited: %w", name, err))
			return
		}
	}
}

func (h *harness) isStopping() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopping
}

// hooks gives the resource what it needs to inject faults into a client
// (one loop of it).
func (h *harness) hooks(client string) clientHooks {
	process := processOf(client)
	h.mu.Lock()
	p := h.procs[process]
	h.mu.Unlock()
	plan := &randomPlan{rng: streamFor(h.cfg.Seed, "faults/"+client), grants: streamFor(h.cfg.Seed, "grant-faults/"+client),
		releases: streamFor(h.cfg.Seed, "release-faults/"+client), ttl: h.cfg.TTL, grantPauseRate: h.cfg.GrantPauseRate}
	if p != nil {
		plan.crashRate, plan.pauseRate, plan.releaseKillRate = h.cfg.KillRate, h.cfg.PauseRate, h.cfg.ReleaseKillRate
		return clientHooks{
			plan: plan,
			kill: func(kind string) bool { h.fault(kind, client); p.kill(); return true },
			pause: func(kind string, d time.Duration, stop <-chan struct{}) {
				h.rec.faultFor(kind, client, d)
				p.pause(d, stop)
			},
		}
	}
	plan.crashRate, plan.pauseRate = h.cfg.CrashRate, h.cfg.StallRate
	return clientHooks{
		plan: plan,
		kill: func(string) bool { h.fault(FaultCrash, client); return false },
		pause: func(kind string, d time.Duration, stop <-chan struct{}) {
			if kind == FaultPause {
				kind = FaultStall
			}
			// On record with its length, as a process's stop is: the loop
			// can report nothing while it is held (lossSignals).
			h.rec.faultFor(kind, client, d)
			_ = sleepOrStop(d, stop)
		},
	}
}

// processOf is the client incarnation a loop belongs to: "p1.2" for
// "p1.2/0".
func processOf(loop string) string {
	process, _, _ := strings.Cut(loop, "/")
	return process
}

// slotName is the client slot a loop or incarnation belongs to, every
// incarnation alike: "p1" for "p1.2/0". Each slot of the partition mode
// reaches Redis through a proxy of its own.
func slotName(client string) string {
	slot, _, _ := strings.Cut(client, ".")
	return slot
}
