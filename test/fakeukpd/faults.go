package fakeukpd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// FaultKind names a misbehaviour of the server.
type FaultKind string

// The faults. Slow composes with the others. Of the response faults
// (Status500, Garbage, HugeBody, Truncated, Stall) the first in that order
// wins when several apply. The data faults (ClockBackwards,
// DuplicateInstances) change what both paths report and compose with
// everything. CounterReset acts once and is not kept. The transport faults
// (Refused, UntrustedCertificate, WrongNameCertificate, HandshakeStall)
// live below HTTP, in an Endpoint.
const (
	FaultSlow               FaultKind = "Slow"
	FaultStatus500          FaultKind = "Status500"
	FaultGarbage            FaultKind = "Garbage"
	FaultHugeBody           FaultKind = "HugeBody"
	FaultTruncated          FaultKind = "Truncated"
	FaultStall              FaultKind = "Stall"
	FaultClockBackwards     FaultKind = "ClockBackwards"
	FaultDuplicateInstances FaultKind = "DuplicateInstances"
	FaultCounterReset       FaultKind = "CounterReset"
	// FaultClockOffset sets the platform's wall clock ahead (a positive
	// offset) or behind (a negative one).
	FaultClockOffset FaultKind = "ClockOffset"
	// FaultHostileText answers 200 in the Prometheus text form with Bytes
	// (default 60 MiB, under the client's cap) of lines of 100,000 labels
	// each: what a parser quadratic in a line's labels chews on for hours.
	FaultHostileText FaultKind = "HostileText"
	// FaultOlderForm answers the JSON metrics in the form of older ukpd
	// releases: cpu_time_s (CPU time over the last second, a rate) and
	// uptime_s in place of cpu_time_ms and uptime_ms.
	FaultOlderForm FaultKind = "OlderForm"
)

// DefaultHostileTextBytes is the body size of a HostileText fault that
// names none.
const DefaultHostileTextBytes = 60 << 20

// DefaultHugeBodyBytes is the body size of a HugeBody fault that names none.
const DefaultHugeBodyBytes = 64 << 20

// Fault is a fault to set.
type Fault struct {
	Kind FaultKind `json:"kind"`
	// Path limits the fault to "/v1/instances" or "/v1/instances/metrics"
	// (which covers /v1/instances/{uuid}/metrics); empty means both.
	Path string `json:"path,omitempty"`
	// Delay is the wait before answering, for Slow.
	Delay time.Duration `json:"-"`
	// Bytes is the body size for HugeBody; 0 means DefaultHugeBodyBytes.
	Bytes int64 `json:"bytes,omitempty"`
	// Offset is how far the platform's wall clock is behind, for
	// ClockBackwards, or ahead (negative: behind), for ClockOffset.
	Offset time.Duration `json:"-"`
}

// ClockBackwards sets the platform's wall clock d behind (whole seconds):
// every started_at, stopped_at and created_at it reports is d earlier, as
// from a daemon that derives them from the wall clock and an uptime. CPU
// time and uptime do not follow the wall clock and stay as they are.
func ClockBackwards(d time.Duration) Fault { return Fault{Kind: FaultClockBackwards, Offset: d} }

// ClockOffset sets the platform's wall clock d ahead, or -d behind for a
// negative d (whole seconds): every started_at, stopped_at and created_at
// it reports moves by d. CPU time and uptime stay as they are.
func ClockOffset(d time.Duration) Fault { return Fault{Kind: FaultClockOffset, Offset: d} }

// Slow delays answers by d, on the server's clock.
func Slow(d time.Duration) Fault { return Fault{Kind: FaultSlow, Delay: d} }

// SetFault sets a fault, replacing one of the same kind.
func (s *Server) SetFault(f Fault) error {
	switch f.Kind {
	case FaultSlow:
		if f.Delay <= 0 {
			return fmt.Errorf("fault %s needs a positive delay", f.Kind)
		}
	case FaultHugeBody:
		if f.Bytes <= 0 {
			f.Bytes = DefaultHugeBodyBytes
		}
	case FaultHostileText:
		if f.Bytes <= 0 {
			f.Bytes = DefaultHostileTextBytes
		}
	case FaultStatus500, FaultGarbage, FaultTruncated, FaultStall:
	case FaultClockBackwards, FaultDuplicateInstances, FaultCounterReset, FaultClockOffset, FaultOlderForm:
		if f.Path != "" {
			return fmt.Errorf("fault %s applies to both paths; it takes no path", f.Kind)
		}
		if f.Kind == FaultClockBackwards && f.Offset < time.Second {
			return fmt.Errorf("fault %s needs an offset of at least 1s", f.Kind)
		}
		if f.Kind == FaultClockOffset && f.Offset.Abs() < time.Second {
			return fmt.Errorf("fault %s needs an offset of at least 1s either way", f.Kind)
		}
		if f.Kind == FaultCounterReset {
			s.resetCounters()
			return nil
		}
	default:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	if f.Path != "" && f.Path != listPath && f.Path != metricsPath {
		return fmt.Errorf("fault path %q is neither %s nor %s", f.Path, listPath, metricsPath)
	}
	f.Offset = f.Offset.Truncate(time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[f.Kind] = f
	return nil
}

// ClearFault removes the fault of that kind; an empty kind removes all.
func (s *Server) ClearFault(kind FaultKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind == "" {
		clear(s.faults)
		return
	}
	delete(s.faults, kind)
}

// Faults returns the faults in force, slow first.
func (s *Server) Faults() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Fault
	for _, k := range faultOrder {
		if f, ok := s.faults[k]; ok {
			out = append(out, f)
		}
	}
	return out
}

var faultOrder = []FaultKind{
	FaultSlow, FaultStatus500, FaultGarbage, FaultHugeBody, FaultHostileText, FaultTruncated, FaultStall,
	FaultClockBackwards, FaultClockOffset, FaultDuplicateInstances, FaultOlderForm,
}

// responseFault says whether a fault answers requests in place of the
// server.
func responseFault(k FaultKind) bool {
	switch k {
	case FaultStatus500, FaultGarbage, FaultHugeBody, FaultHostileText, FaultTruncated, FaultStall:
		return true
	}
	return false
}

// serveFault applies the faults that cover path. It reports whether the
// request was answered (or abandoned) by a fault.
func (s *Server) serveFault(w http.ResponseWriter, r *http.Request, path string, isMetrics, asJSON bool) bool {
	key := listPath
	if isMetrics {
		key = metricsPath
	}
	var active []Fault
	for _, f := range s.Faults() {
		if (f.Kind == FaultSlow || responseFault(f.Kind)) && (f.Path == "" || f.Path == key) {
			active = append(active, f)
		}
	}
	if i := slices.IndexFunc(active, func(f Fault) bool { return f.Kind == FaultSlow }); i >= 0 {
		s.wait(r.Context(), active[i].Delay)
		active = slices.Delete(active, i, i+1)
	}
	if len(active) == 0 {
		return false
	}
	switch f := active[0]; f.Kind {
	case FaultStatus500:
		writeAPIError(w, http.StatusInternalServerError, "Internal error (fake fault) on "+path, s.clock.Now(), s.clock)
	case FaultGarbage:
		if asJSON {
			w.Header().Set("Content-Type", contentTypeJSON)
			_, _ = io.WriteString(w, `{"status":"success","data":{"instances":[{"uuid":`+"\x00\xff{{")
		} else {
			w.Header().Set("Content-Type", contentTypeText)
			_, _ = io.WriteString(w, "# TYPE instance_cpu_time_s counter\ninstance_cpu_time_s{instance_uuid= 1.2.3 oops\n\x00\xff")
		}
	case FaultHugeBody:
		streamHugeBody(r.Context(), w, f.Bytes)
	case FaultHostileText:
		streamHostileText(r.Context(), w, f.Bytes)
	case FaultTruncated:
		s.serveTruncated(w, r, isMetrics, asJSON)
	case FaultStall:
		s.serveStall(w, r, asJSON)
	}
	return true
}

// wait blocks for d on the server's clock. If the request ends or the
// server closes first, it abandons the request.
func (s *Server) wait(ctx context.Context, d time.Duration) {
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return
	case <-ctx.Done():
	case <-s.closed:
	}
	panic(http.ErrAbortHandler)
}

// streamHostileText writes size bytes of Prometheus text, in lines of
// 100,000 labels each, without a Content-Length.
func streamHostileText(ctx context.Context, w http.ResponseWriter, size int64) {
	w.Header().Set("Content-Type", contentTypeText)
	w.WriteHeader(http.StatusOK)
	var line bytes.Buffer
	line.WriteString(`instance_cpu_time_s{instance_uuid="hostile"`)
	for i := range 100_000 {
		fmt.Fprintf(&line, `,l%d="v"`, i)
	}
	line.WriteString("} 1\n")
	for size > 0 {
		c := line.Bytes()[:min(int64(line.Len()), size)]
		if _, err := w.Write(c); err != nil || ctx.Err() != nil {
			panic(http.ErrAbortHandler)
		}
		size -= int64(len(c))
	}
}

// streamHugeBody writes size bytes of a JSON-looking array from a small
// buffer, without a Content-Length.
func streamHugeBody(ctx context.Context, w http.ResponseWriter, size int64) {
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(http.StatusOK)
	chunk := make([]byte, 32<<10)
	for i := range chunk {
		chunk[i] = "[1,"[i%3]
	}
	for size > 0 {
		c := chunk[:min(int64(len(chunk)), size)]
		if _, err := w.Write(c); err != nil || ctx.Err() != nil {
			// Abort, so that a cut-short body never looks complete.
			panic(http.ErrAbortHandler)
		}
		size -= int64(len(c))
	}
}
