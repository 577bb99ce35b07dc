package fakekubelet

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// serveFault applies the node's response faults to a request. It reports
// whether the request was answered (or abandoned) by a fault.
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
	case FaultTruncated:
		serveTruncated(w, n.render(r, path, false))
	default:
		return false
	}
	return true
}

// serveTruncated answers 200 with the first half of a well-formed body,
// declared and sent completely: the response ends cleanly, the document
// does not.
func serveTruncated(w http.ResponseWriter, b rendered) {
	cut := b.body[:len(b.body)/2]
	w.Header().Set("Content-Type", b.contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(cut)))
	_, _ = w.Write(cut)
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
