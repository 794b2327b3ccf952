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
//     recovery times (violations.go, their kinds; bounds.go, its
//     parameters and a run's bounds); safety.go, the overlap, token-order
//     and fence checks; recovery.go, crashed holders' recovery;
//     freewait.go, its free waits, and heldby.go, what the server held
//     during one; loss.go, its check that a holder relying on its Lock is
//     told of a loss by the lease's end.
//   - linearize.go: the second checker, Porcupine over the same history.
//   - resource.go: the protected resource, which rejects stale fencing
//     tokens; recorder.go, the recorder behind it; clients reach it over
//     a unix socket (protocol.go).
//   - worker.go: one lock client, shared by goroutine clients and the
//     chaosclient program; loop.go, one of its acquisition loops, and
//     holding.go, what a loop holds; trace.go, what a client learns of its
//     own calls; losswatch.go, how a holder learns of a loss; waiting.go,
//     its Acquire calls in progress.
//   - clock.go: the skewed clock each client gets.
//   - redis.go, procs.go: redis-server and client processes.
//   - harness.go: Run, which puts it all together under a seeded schedule
//     of faults; clients.go, the run's clients; faultkinds.go, the kinds of
//     fault; faultplan.go, those injected at the resource; restarts.go,
//     server restarts; serverfaults.go, the faults injected from outside
//     the clients; partition.go, one client at a time cut off from Redis;
//     claimfaults.go and faultconn.go, the heard mode's faults, which
//     each client injects below its go-redis client (claims after a
//     handoff delayed, dropped or their replies lost, handoff messages
//     held on arrival); claimdoubts.go, such claims in doubt.
//   - semaphore.go: the semaphore mode's semaphore, its calls as calls of
//     every permit key, and its check that no more holders than its
//     permits hold them at once (permitsExceeded).
//   - rwlock.go: the rwlock mode's read/write lock, its calls under its
//     writer key, its check that no writer's section overlaps another
//     (writerOverlaps) and its model for Porcupine; multi.go, the multi
//     mode's groups, each a section on each of its keys (perKey), and
//     their check (groupPartials).
//   - modes.go, config.go, breaks.go: the modes (the library's
//     configurations under test), the run's parameters and the
//     assumptions a run can break; the network faults themselves,
//     held-back requests among them, are internal/faultproxy's.
//
// docs/RELIABILITY.md states the assumptions, what is injected and the
// figures of a real run.
package chaos
