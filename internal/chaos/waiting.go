package chaos

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/setnxlock/setnxlock"
)

// A client's Acquire calls in progress, by key, and the faults that end them
// from inside the client: Locker.Close while one waits.

// waiting is a client's Acquire calls in progress, by key, for the faults
// that end them.
type waiting struct {
	mu    sync.Mutex
	byKey map[string]map[*pendingAcquire]struct{}
	n     int
}

// pendingAcquire is one Acquire in progress.
type pendingAcquire struct{ cancel context.CancelFunc }

func (w *waiting) add(key string, p *pendingAcquire) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byKey[key] == nil {
		w.byKey[key] = map[*pendingAcquire]struct{}{}
	}
	w.byKey[key][p] = struct{}{}
	w.n++
}

func (w *waiting) remove(key string, p *pendingAcquire) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byKey[key], p)
	w.n--
}

// on returns the Acquire calls waiting on key now.
func (w *waiting) on(key string) []*pendingAcquire {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*pendingAcquire, 0, len(w.byKey[key]))
	for p := range w.byKey[key] {
		out = append(out, p)
	}
	return out
}

func (w *waiting) any() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n > 0
}

// closeWhileWaiting calls Locker.Close at random moments while one of the
// client's Acquire calls waits: the Locker must stay usable, and its
// waiters must still be served.
func closeWhileWaiting(ctx context.Context, locker *setnxlock.Locker, waits *waiting, ev *eventConn, every time.Duration, rng *rand.Rand) {
	for {
		if sleep(ctx, time.Duration(rng.ExpFloat64()*float64(every))) != nil {
			return
		}
		if waits.any() {
			_ = locker.Close()
			ev.fault(FaultClose)
		}
	}
}
