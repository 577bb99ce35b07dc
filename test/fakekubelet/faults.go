package fakekubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// FaultKind names a misbehaviour of a node.
type FaultKind string

// The faults a node can be given. Slow composes with the response faults;
// of the response faults (Status500, Garbage, HugeBody, ResetConnection,
// Stall) the last one set wins. Dead closes the listener. CounterReset acts
// once and is not kept.
const (
	FaultSlow            FaultKind = "Slow"
	FaultStatus500       FaultKind = "Status500"
	FaultGarbage         FaultKind = "Garbage"
	FaultHugeBody        FaultKind = "HugeBody"
	FaultResetConnection FaultKind = "ResetConnection"
	FaultStall           FaultKind = "Stall"
	FaultDead            FaultKind = "Dead"
	FaultCounterReset    FaultKind = "CounterReset"
)

// Fault is a fault to set on a node.
type Fault struct {
	Kind FaultKind
	// Delay is the wait before responding, for Slow.
	Delay time.Duration
	// Bytes is the body size for HugeBody; 0 means DefaultHugeBodyBytes.
	Bytes int64
}

// Slow delays every response by d (until the request is cancelled).
func Slow(d time.Duration) Fault { return Fault{Kind: FaultSlow, Delay: d} }

// HugeBody answers 200 with a body of n bytes, streamed.
func HugeBody(n int64) Fault { return Fault{Kind: FaultHugeBody, Bytes: n} }

// FaultState is the set of faults in force on a node.
type FaultState struct {
	Delay         time.Duration `json:"delay,omitempty"`
	Response      FaultKind     `json:"response,omitempty"`
	HugeBodyBytes int64         `json:"hugeBodyBytes,omitempty"`
	Dead          bool          `json:"dead,omitempty"`
}

// MarshalJSON writes Delay as a Go duration string.
func (s FaultState) MarshalJSON() ([]byte, error) {
	type plain FaultState
	out := struct {
		plain
		Delay string `json:"delay,omitempty"`
	}{plain: plain(s)}
	if s.Delay > 0 {
		out.Delay = s.Delay.String()
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *FaultState) UnmarshalJSON(b []byte) error {
	type plain FaultState
	in := struct {
		*plain
		Delay string `json:"delay,omitempty"`
	}{plain: (*plain)(s)}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	s.Delay = 0
	if in.Delay != "" {
		d, err := time.ParseDuration(in.Delay)
		if err != nil {
			return fmt.Errorf("delay: %w", err)
		}
		s.Delay = d
	}
	return nil
}

// Faults returns the faults in force.
func (n *Node) Faults() FaultState {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.faults
}

// SetFault sets a fault, effective for requests that arrive afterwards.
func (n *Node) SetFault(f Fault) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	switch f.Kind {
	case FaultSlow:
		if f.Delay <= 0 {
			return fmt.Errorf("fault %s needs a positive delay", f.Kind)
		}
		n.mu.Lock()
		n.faults.Delay = f.Delay
		n.mu.Unlock()
	case FaultStatus500, FaultGarbage, FaultHugeBody, FaultResetConnection, FaultStall:
		size := int64(0)
		if f.Kind == FaultHugeBody {
			if size = f.Bytes; size <= 0 {
				size = DefaultHugeBodyBytes
			}
		}
		n.mu.Lock()
		n.faults.Response, n.faults.HugeBodyBytes = f.Kind, size
		n.mu.Unlock()
	case FaultDead:
		n.mu.Lock()
		n.faults.Dead = true
		n.mu.Unlock()
		return n.kill()
	case FaultCounterReset:
		n.ResetCounters()
	default:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	return nil
}

// ClearFault removes one fault; an empty kind removes them all. Clearing
// Dead listens again on the same port.
func (n *Node) ClearFault(kind FaultKind) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	n.mu.Lock()
	wasDead := n.faults.Dead
	switch kind {
	case "":
		n.faults = FaultState{}
	case FaultSlow:
		n.faults.Delay = 0
	case FaultStatus500, FaultGarbage, FaultHugeBody, FaultResetConnection, FaultStall:
		if n.faults.Response == kind {
			n.faults.Response, n.faults.HugeBodyBytes = "", 0
		}
	case FaultDead:
		n.faults.Dead = false
	case FaultCounterReset:
	default:
		n.mu.Unlock()
		return fmt.Errorf("unknown fault kind %q", kind)
	}
	revive := wasDead && !n.faults.Dead
	n.mu.Unlock()
	if !revive {
		return nil
	}
	if err := n.revive(); err != nil {
		n.mu.Lock()
		n.faults.Dead = true
		n.mu.Unlock()
		return err
	}
	return nil
}

// serveFault applies the node's faults to a request. It reports whether
// the request was answered (or abandoned) by a fault.
func (n *Node) serveFault(w http.ResponseWriter, r *http.Request, path string) bool {
	faults := n.Faults()
	stop := n.stopChan()
	if faults.Delay > 0 {
		n.wait(r.Context(), stop, faults.Delay)
	}
	switch faults.Response {
	case FaultStatus500:
		http.Error(w, "Internal Error: failed to get node info: fake kubelet fault", http.StatusInternalServerError)
	case FaultGarbage:
		if path == summaryPath {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"node":{"nodeName":"`+n.name+`","cpu":{"time":"yesterday","usageNanoCores":-"}},"pods":[{`+"\x00\xff")
		} else {
			w.Header().Set("Content-Type", ResourceMetricsContentType)
			_, _ = io.WriteString(w, "# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total{ 1.0.0 not-a-number\n\x00\xff")
		}
	case FaultHugeBody:
		streamHugeBody(r.Context(), w, faults.HugeBodyBytes)
	case FaultResetConnection:
		resetConnection(r)
	case FaultStall:
		if path == summaryPath {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"node":{"nodeName":"`+n.name+`",`)
		} else {
			w.Header().Set("Content-Type", ResourceMetricsContentType)
			_, _ = io.WriteString(w, "# HELP ")
		}
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-stop:
		}
		// Abort rather than end the body, so that no client ever sees the
		// response complete.
		panic(http.ErrAbortHandler)
	default:
		return false
	}
	return true
}

// wait blocks for d on the fleet clock. If the request ends or the node
// stops first, it aborts the request.
func (n *Node) wait(ctx context.Context, stop <-chan struct{}, d time.Duration) {
	t := n.fleet.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return
	case <-ctx.Done():
	case <-stop:
	}
	panic(http.ErrAbortHandler)
}

// streamHugeBody writes size bytes of a JSON-looking array from a small
// reused buffer, without a Content-Length.
func streamHugeBody(ctx context.Context, w http.ResponseWriter, size int64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	chunk := make([]byte, 32<<10)
	for i := range chunk {
		chunk[i] = "[0,"[i%3]
	}
	for size > 0 {
		c := chunk
		if int64(len(c)) > size {
			c = c[:size]
		}
		if _, err := w.Write(c); err != nil || ctx.Err() != nil {
			// Abort, so that a cut-short body never looks complete.
			panic(http.ErrAbortHandler)
		}
		size -= int64(len(c))
	}
}

// resetConnection closes the request's TCP connection with SO_LINGER 0, so
// the client sees a reset (on HTTP/1.1 and HTTP/2 alike).
func resetConnection(r *http.Request) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = nc.NetConn()
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	if c != nil {
		_ = c.Close()
	}
}
