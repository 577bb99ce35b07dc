package fakeukpd

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// FaultKind names a misbehaviour of the server: one of fakecore's, or one
// of ukpd's own below.
type FaultKind = fakecore.FaultKind

// The faults are fakecore's and these. Slow composes with the others. Of
// the response faults (Status500, Garbage, HugeBody, HostileText,
// Truncated, Stall) the first in that order wins when several apply. The
// data faults (ClockBackwards, ClockOffset, DuplicateInstances, OlderForm)
// change what both paths report and compose with everything; the clock
// faults move every started_at, stopped_at and created_at, as from a daemon
// that derives them from the wall clock and an uptime, while CPU time and
// uptime stay as they are. CounterReset
// acts once and is not kept. The transport faults (Refused and fakecore's)
// live below HTTP, in a fakecore.Endpoint.
const (
	// FaultDuplicateInstances reports a second instance for every
	// container, with twice the values.
	FaultDuplicateInstances FaultKind = "DuplicateInstances"
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

// Fault is a fault to set; it takes no Pod.
type Fault = fakecore.Fault

// ClockOffset sets the platform's wall clock d ahead, or -d behind for a
// negative d (whole seconds): every started_at, stopped_at and created_at
// it reports moves by d. CPU time and uptime stay as they are.
func ClockOffset(d time.Duration) Fault {
	return Fault{Kind: FaultClockOffset, Offset: metav1.Duration{Duration: d}}
}

// SetFault sets a fault, replacing one of the same kind.
func (s *Server) SetFault(f Fault) error {
	if err := f.Check(); err != nil {
		return err
	}
	if f.Pod != "" {
		return fmt.Errorf("fault %s: the platform's faults take no pod", f.Kind)
	}
	switch f.Kind {
	case FaultHostileText:
		if f.Bytes <= 0 {
			f.Bytes = DefaultHostileTextBytes
		}
	case fakecore.FaultSlow, fakecore.FaultHugeBody, fakecore.FaultStatus500, fakecore.FaultGarbage, fakecore.FaultTruncated, fakecore.FaultStall:
	case fakecore.FaultClockBackwards, FaultDuplicateInstances, fakecore.FaultCounterReset, FaultClockOffset, FaultOlderForm:
		if f.Path != "" {
			return fmt.Errorf("fault %s applies to both paths; it takes no path", f.Kind)
		}
		if f.Kind == FaultClockOffset && f.Offset.Abs() < time.Second {
			return fmt.Errorf("fault %s needs an offset of at least 1s either way", f.Kind)
		}
		if f.Kind == fakecore.FaultCounterReset {
			s.resetCounters()
			return nil
		}
	default:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	if f.Path != "" && f.Path != listPath && f.Path != metricsPath {
		return fmt.Errorf("fault path %q is neither %s nor %s", f.Path, listPath, metricsPath)
	}
	f.Offset.Duration = f.Offset.Truncate(time.Second)
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

// Faults returns the faults in force in faultOrder.
func (s *Server) Faults() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Fault, 0, len(s.faults))
	for _, k := range faultOrder {
		if f, ok := s.faults[k]; ok {
			out = append(out, f)
		}
	}
	return out
}

// faultOrder is Slow, the response faults in order of precedence, then the
// data faults.
var faultOrder = []FaultKind{
	fakecore.FaultSlow, fakecore.FaultStatus500, fakecore.FaultGarbage, fakecore.FaultHugeBody, FaultHostileText, fakecore.FaultTruncated, fakecore.FaultStall,
	fakecore.FaultClockBackwards, FaultClockOffset, FaultDuplicateInstances, FaultOlderForm,
}

// serveFault applies the faults that cover path. It reports whether the
// request was answered (or abandoned) by a fault.
func (s *Server) serveFault(w http.ResponseWriter, r *http.Request, path string, isMetrics, asJSON bool) bool {
	key := listPath
	if isMetrics {
		key = metricsPath
	}
	format := fakecore.Format{
		ContentType: contentTypeText,
		Status500: func(w http.ResponseWriter) {
			writeAPIError(w, http.StatusInternalServerError, "Internal error (fake fault) on "+path, s.clock.Now(), s.clock)
		},
		Garbage:     "# TYPE instance_cpu_time_s counter\ninstance_cpu_time_s{instance_uuid= 1.2.3 oops\n\x00\xff",
		StallPrefix: "# HELP ",
		Render: func() (int, []byte) {
			rec := httptest.NewRecorder()
			s.serveData(rec, r, strings.TrimSuffix(r.URL.Path, "/"), isMetrics, asJSON, s.clock.Now())
			return rec.Code, rec.Body.Bytes()
		},
	}
	if asJSON {
		format.ContentType = contentTypeJSON
		format.Garbage = `{"status":"success","data":{"instances":[{"uuid":` + "\x00\xff{{"
		format.StallPrefix = `{"status":"success","data":{"instances":[`
	}
	// Slow comes first, then the response faults in order of precedence.
	rs := fakecore.Responder{Clock: s.clock, Stop: s.closed}
	for _, f := range s.Faults() {
		switch {
		case f.Path != "" && f.Path != key:
		case f.Kind == fakecore.FaultSlow:
			rs.Wait(r.Context(), f.Delay.Duration)
		case f.Kind == FaultHostileText:
			fakecore.StreamBody(r.Context(), w, contentTypeText, hostileLine(), f.Bytes)
			return true
		case rs.Serve(w, r, f.Kind, f.Bytes, format):
			return true
		}
	}
	return false
}

// hostileLine is a line of Prometheus text with 100,000 labels.
func hostileLine() []byte {
	var line bytes.Buffer
	line.WriteString(`instance_cpu_time_s{instance_uuid="hostile"`)
	for i := range 100_000 {
		fmt.Fprintf(&line, `,l%d="v"`, i)
	}
	line.WriteString("} 1\n")
	return line.Bytes()
}
