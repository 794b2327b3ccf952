package faultproxy

// Freezing: every byte in both directions held, nothing closed, as behind
// a partition, until Thaw.

// Freeze stops every byte in both directions, on open connections and on
// those accepted while frozen, without closing anything: to the client the
// server has gone silent, as behind a partition or a stalled switch, and
// only its own timeouts end a request. What was sent meanwhile is delivered
// by Thaw, in order.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // frozen already
	}
}

// Thaw lets the bytes held since Freeze flow again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// awaitThaw returns once the proxy is not frozen.
func (p *Proxy) awaitThaw() {
	p.mu.Lock()
	gate := p.thawed
	p.mu.Unlock()
	<-gate
}

func closedGate() chan struct{} { c := make(chan struct{}); close(c); return c }
