package chaos

// Server restarts on the seeded schedule, counted in acquisitions, and the
// end of the run once enough acquisitions are recorded.

// acquired is the recorder's callback: it ends the run at the target and
// triggers server restarts and ACL revocations on the seeded schedule.
func (h *harness) acquired(n int) {
	if h.cfg.Acquisitions > 0 && n >= h.cfg.Acquisitions {
		h.enoughOnce.Do(func() { close(h.enough) })
	}
	if h.cfg.RevokeACL && h.cfg.Acquisitions > 0 {
		h.revokeOnSchedule(n)
	}
	if h.cfg.RestartEvery <= 0 {
		return
	}
	h.mu.Lock()
	due := n >= h.nextRestart
	if due {
		h.nextRestart = n + h.restartGap()
	}
	h.mu.Unlock()
	if due {
		select {
		case h.restartNow <- struct{}{}:
		default: // one is already under way
		}
	}
}

// restartGap draws the number of acquisitions until the next restart:
// RestartEvery, give or take half. Callers hold mu, or own h.
func (h *harness) restartGap() int {
	every := max(h.cfg.RestartEvery, 1)
	return every/2 + h.restarts.IntN(every+1)
}

// restarter kills and restarts a redis-server when told to.
func (h *harness) restarter() {
	defer h.wg.Done()
	rng := streamFor(h.cfg.Seed, "restarted-node")
	for {
		select {
		case <-h.stop:
			return
		case <-h.restartNow:
		}
		down, err := h.servers.restart(rng)
		if err != nil {
			h.fail(err)
			return
		}
		h.fault(FaultRestart, "")
		h.rec.serverDown(down)
	}
}
