package chaos

import (
	"time"
)

// How a holder that works until told (LockerConfig.UntilLost) learns of the
// loss of its lock: a watch on the Lock's Done for the length of its section.

// lossWatch is how a holder that works until told learns of its loss: a
// goroutine that waits for its Lock's Done and notes the instant, and the
// lease end the Lock stated then, until the section ends.
type lossWatch struct {
	signalled chan struct{} // closed once Done was seen closed; at and leaseEnd are set before
	ended     chan struct{} // closed when the section ends
	exited    chan struct{} // closed when the goroutine returns
	at        time.Time     // when Done was seen closed, wall clock
	leaseEnd  time.Time     // ExpiresAt then, by the holder's clock
}

func watchLoss(lock holding) *lossWatch {
	w := &lossWatch{signalled: make(chan struct{}), ended: make(chan struct{}), exited: make(chan struct{})}
	done := lock.Done()
	go func() {
		defer close(w.exited)
		select {
		case <-done:
			w.at, w.leaseEnd = time.Now(), lock.ExpiresAt()
			close(w.signalled)
		case <-w.ended:
		}
	}()
	return w
}

// told reports whether the holder has been told of its loss.
func (w *lossWatch) told() bool {
	select {
	case <-w.signalled:
		return true
	default:
		return false
	}
}

// sleep works for d, or until told of the loss.
func (w *lossWatch) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.signalled:
	}
}

// stop ends the watch with the section and waits for its goroutine.
func (w *lossWatch) stop() {
	close(w.ended)
	<-w.exited
}
