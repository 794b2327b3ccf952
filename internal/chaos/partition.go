package chaos

import (
	"time"
)

// Partitions (H11): in the partition mode each client slot reaches Redis
// through a proxy of its own (backend.bySlot). One client at a time, one
// whose loop has been inside a critical section for a while (a long hold,
// renewing itself), is cut off: its proxy is frozen, so that its requests
// and the server's replies stop in both directions and nothing is closed,
// while every other client reaches Redis. A renewal sent into the
// partition gets no reply; only a timeout ends it. The partition outlasts
// the lease and a read timeout (Config.partitionLength), so the holder's
// lease ends while it is cut off and another client may take the key:
// the holder must have been told by then (WorkAfterLoss). On thaw the
// bytes held meanwhile are delivered, late.

// partitionPoll is how often the partitioner looks for a holder to cut
// off when none is in a long section.
const partitionPoll = 5 * time.Millisecond

// startPartitions starts the partitioner when the run has proxies by slot.
func (h *harness) startPartitions() {
	if h.cfg.PartitionEvery <= 0 || len(h.servers.bySlot) == 0 {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		rng := streamFor(h.cfg.Seed, "partitions")
		for sleepOrStop(time.Duration(rng.ExpFloat64()*float64(h.cfg.PartitionEvery)), h.stop) == nil {
			// A section entered half a lease ago is a long hold: short ones
			// last microseconds.
			var holders []string
			for len(holders) == 0 {
				if sleepOrStop(partitionPoll, h.stop) != nil {
					return
				}
				holders = h.rec.inSection(time.Now().Add(-h.cfg.TTL / 2))
			}
			loop := holders[rng.IntN(len(holders))]
			proxy := h.servers.bySlot[slotOf(loop, h.cfg.Goroutines)]
			d := h.cfg.partitionLength(rng.Float64())
			h.rec.faultFor(FaultPartition, loop, d)
			proxy.Freeze()
			_ = sleepOrStop(d, h.stop)
			proxy.Thaw()
		}
	}()
}
