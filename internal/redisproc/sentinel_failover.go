package redisproc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The faults a test injects into a Sentinel deployment and the ways back:
// kill or pause the primary, wait for the promotion, restart or resume a
// data server as a replica of the new primary.

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
