// Package chaos is the fault-injection harness of setnxlock: it runs many
// lock clients, as goroutines and as separate OS processes, against real
// redis-server processes through a fault-injecting proxy, records every
// acquisition and every use of a fenced resource, and checks the recorded
// history for safety and liveness.
//
// The pieces, one file each:
//
//   - history.go: what is recorded (acquisitions, resource operations,
//     crashes, server downtime).
//   - checker.go: Check, a pure function from a history to violations and
//     recovery times.
//   - resource.go: the protected resource, which rejects stale fencing
//     tokens, and the recorder behind it; clients reach it over a unix
//     socket (protocol.go).
//   - worker.go: one lock client's loop, shared by goroutine clients and
//     the chaosclient program.
//   - clock.go: the skewed clock each client gets.
//   - redis.go, procs.go: redis-server and client processes.
//   - harness.go: Run, which puts it all together under a seeded schedule
//     of faults.
//
// docs/RELIABILITY.md states the assumptions, what is injected and the
// figures of a real run.
package chaos
