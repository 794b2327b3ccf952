package chaos

import (
	"hash/fnv"
	"time"
)

// SkewedClock is a setnxlock.Clock that reads the machine's wall clock
// shifted by a fixed offset: a client whose clock disagrees with the
// others'. Every client runs on the one machine, so the harness knows each
// clock's offset exactly and can turn the client's timestamps back into
// wall-clock instants.
type SkewedClock struct {
	Offset time.Duration
}

// Now returns the wall clock plus the offset, with no monotonic reading:
// the library compares it with timestamps read back from Redis, which have
// none either.
func (c SkewedClock) Now() time.Time { return time.Now().Round(0).Add(c.Offset) }

// offsetFor draws a client's clock offset uniformly from [-skew/2, skew/2],
// so that any two clients disagree by at most skew. The draw depends only
// on the seed and the client's name, so a seed gives every client the same
// clock in every run.
func offsetFor(seed uint64, client string, skew time.Duration) time.Duration {
	if skew <= 0 {
		return 0
	}
	r := streamFor(seed, "clock/"+client)
	return time.Duration(r.Int64N(int64(skew)+1)) - skew/2
}

// nameHash turns a name into the second half of a PCG seed, so each client
// and each fault stream draws from its own sequence.
func nameHash(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}
