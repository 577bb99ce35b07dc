package fakecore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// FaultKind names a misbehaviour of a fake.
type FaultKind string

// The faults every fake knows; each fake adds data faults of its own wire
// format. Response faults (Status500 to ResetConnection) answer in place of
// the fake, and Slow delays any answer; transport faults act below HTTP:
// Refused closes the listener, the others break TLS. ClockBackwards moves
// the times a fake reports back; CounterReset restarts its CPU counters once
// and is not kept.
const (
	FaultSlow            FaultKind = "Slow"
	FaultStatus500       FaultKind = "Status500"
	FaultGarbage         FaultKind = "Garbage"
	FaultHugeBody        FaultKind = "HugeBody"
	FaultTruncated       FaultKind = "Truncated"
	FaultStall           FaultKind = "Stall"
	FaultResetConnection FaultKind = "ResetConnection"

	FaultRefused              FaultKind = "Refused"
	FaultUntrustedCertificate FaultKind = "UntrustedCertificate"
	FaultWrongNameCertificate FaultKind = "WrongNameCertificate"
	FaultHandshakeStall       FaultKind = "HandshakeStall"

	FaultClockBackwards FaultKind = "ClockBackwards"
	FaultCounterReset   FaultKind = "CounterReset"
)

// Fault is a fault to set on a fake, or one in force; as JSON, the body of
// a fake's fault calls. Each fake refuses the scope of the other.
type Fault struct {
	Kind FaultKind `json:"kind"`
	// Delay is the wait before answering, for Slow.
	Delay metav1.Duration `json:"delay,omitzero"`
	// Bytes is the body size of HugeBody (64 MiB, over every client's cap,
	// when 0) and of the fake ukpd's HostileText.
	Bytes int64 `json:"bytes,omitempty"`
	// Offset is how far the fake's wall clock is behind, for
	// ClockBackwards, or ahead, for the fake ukpd's ClockOffset.
	Offset metav1.Duration `json:"offset,omitzero"`
	// Pod limits the fake kubelet's DuplicatePods to one pod,
	// "namespace/name"; empty means every pod of the node.
	Pod string `json:"pod,omitempty"`
	// Path limits a fake ukpd's fault to "/v1/instances" or
	// "/v1/instances/metrics" (which covers /v1/instances/{uuid}/metrics);
	// empty means both.
	Path string `json:"path,omitempty"`
}

// Slow delays every answer by d, on the fake's clock.
func Slow(d time.Duration) Fault { return Fault{Kind: FaultSlow, Delay: metav1.Duration{Duration: d}} }

// HugeBody answers 200 with a body of n bytes, streamed.
func HugeBody(n int64) Fault { return Fault{Kind: FaultHugeBody, Bytes: n} }

// ClockBackwards sets the fake's wall clock d back (whole seconds).
func ClockBackwards(d time.Duration) Fault {
	return Fault{Kind: FaultClockBackwards, Offset: metav1.Duration{Duration: d}}
}

// Check returns what is wrong with the fields every fake reads alike.
func (f Fault) Check() error {
	switch {
	case f.Kind == FaultSlow && f.Delay.Duration <= 0:
		return fmt.Errorf("fault %s needs a positive delay", f.Kind)
	case f.Kind == FaultClockBackwards && f.Offset.Duration < time.Second:
		return fmt.Errorf("fault %s needs an offset of at least 1s", f.Kind)
	}
	return nil
}

// Format is what a fake renders for the response faults: the Content-Type
// asked for, its internal-error answer, a body that starts well and then is
// not the format at all, the start of a stalled body, and its whole answer
// without a fault (for Truncated).
type Format struct {
	ContentType          string
	Status500            func(w http.ResponseWriter)
	Garbage, StallPrefix string
	Render               func() (code int, body []byte)
}

// Responder serves response faults on a fake's clock; an answer it holds
// back is abandoned when the request ends or Stop closes.
type Responder struct {
	Clock clock.Clock
	Stop  <-chan struct{}
}

// Wait blocks for d on the fake's clock, or abandons the request if it ends
// or the fake stops first.
func (rs Responder) Wait(ctx context.Context, d time.Duration) {
	t := rs.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return
	case <-ctx.Done():
	case <-rs.Stop:
	}
	panic(http.ErrAbortHandler)
}

// Serve answers r with the response fault kind (of size bytes for
// HugeBody) in format f, and reports whether kind was a response fault.
func (rs Responder) Serve(w http.ResponseWriter, r *http.Request, kind FaultKind, size int64, f Format) bool {
	switch kind {
	case FaultStatus500:
		f.Status500(w)
	case FaultGarbage:
		w.Header().Set("Content-Type", f.ContentType)
		_, _ = io.WriteString(w, f.Garbage)
	case FaultHugeBody:
		// A JSON-looking array that never ends.
		StreamBody(r.Context(), w, "application/json", bytes.Repeat([]byte("[0,"), 10<<10), cmp.Or(max(size, 0), 64<<20))
	case FaultTruncated:
		code, body := f.Render()
		cut := body[:len(body)/2]
		w.Header().Set("Content-Type", f.ContentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(cut)))
		w.WriteHeader(code)
		_, _ = w.Write(cut)
	case FaultStall:
		w.Header().Set("Content-Type", f.ContentType)
		_, _ = io.WriteString(w, f.StallPrefix)
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-rs.Stop:
		}
		// Abort rather than end the body, so that no client ever sees the
		// response complete.
		panic(http.ErrAbortHandler)
	case FaultResetConnection:
		resetConnection(r)
	default:
		return false
	}
	return true
}

// StreamBody answers 200 with size bytes of chunk over and over, without
// a Content-Length: a body over any client's cap from a small buffer.
func StreamBody(ctx context.Context, w http.ResponseWriter, contentType string, chunk []byte, size int64) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	for size > 0 {
		c := chunk[:min(int64(len(chunk)), size)]
		if _, err := w.Write(c); err != nil || ctx.Err() != nil {
			// Abort, so that a cut-short body never looks complete.
			panic(http.ErrAbortHandler)
		}
		size -= int64(len(c))
	}
}

type connKey struct{}

// ConnContext keeps the connection where ResetConnection finds it.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// resetConnection closes the request's TCP connection with SO_LINGER 0, so
// the client sees a reset (on HTTP/1.1 and HTTP/2 alike). The server must
// have ConnContext.
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
