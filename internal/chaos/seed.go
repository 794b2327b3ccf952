package chaos

import "math/rand/v2"

// streamFor returns the random stream named name of the run seeded with
// seed. Every decision of a run draws from a stream of its own (a client's
// choices, a client's faults, a clock, the server restarts), so that a
// seed fixes each of them however the goroutines and processes happen to
// interleave.
func streamFor(seed uint64, name string) *rand.Rand {
	return rand.New(rand.NewPCG(seed, nameHash(name)))
}
