package fakeukpd

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// FaultKind names a misbehaviour of the server.
type FaultKind = fakecore.FaultKind

// The faults are fakecore's and these (README.md). The clock faults move
// every started_at, stopped_at and created_at, as from a daemon that derives
// them from the wall clock and an uptime; CPU time and uptime stay.
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

// Fault is a fault to set; it takes no Pod.
type Fault = fakecore.Fault

// ClockOffset sets the platform's wall clock d ahead, or -d behind for a
// negative d (whole seconds).
func ClockOffset(d time.Duration) Fault {
	return Fault{Kind: FaultClockOffset, Offset: metav1.Duration{Duration: d}}
}

// faultOrder is Slow, the response faults in order of precedence, then the
// data faults (from ClockBackwards on), which cover both paths.
var faultOrder = []FaultKind{
	fakecore.FaultSlow, fakecore.FaultStatus500, fakecore.FaultGarbage, fakecore.FaultHugeBody, FaultHostileText,
	fakecore.FaultTruncated, fakecore.FaultStall,
	fakecore.FaultClockBackwards, FaultClockOffset, FaultDuplicateInstances, FaultOlderForm,
}

// SetFault sets a fault, replacing one of the same kind.
func (s *Server) SetFault(f Fault) error {
	i := slices.Index(faultOrder, f.Kind)
	data := f.Kind == fakecore.FaultCounterReset || i >= slices.Index(faultOrder, fakecore.FaultClockBackwards)
	switch err := f.Check(); {
	case err != nil:
		return err
	case i < 0 && !data:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	case f.Pod != "":
		return fmt.Errorf("fault %s: the platform's faults take no pod", f.Kind)
	case data && f.Path != "":
		return fmt.Errorf("fault %s applies to both paths; it takes no path", f.Kind)
	case f.Path != "" && f.Path != listPath && f.Path != metricsPath:
		return fmt.Errorf("fault path %q is neither %s nor %s", f.Path, listPath, metricsPath)
	case f.Kind == FaultClockOffset && f.Offset.Abs() < time.Second:
		return fmt.Errorf("fault %s needs an offset of at least 1s either way", f.Kind)
	case f.Kind == fakecore.FaultCounterReset:
		s.resetCounters()
		return nil
	case f.Kind == FaultHostileText && f.Bytes <= 0:
		f.Bytes = 60 << 20
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
	maps.DeleteFunc(s.faults, func(k FaultKind, _ Fault) bool { return kind == "" || k == kind })
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

// serveFault applies Slow, then the first response fault that covers path,
// and reports whether a fault answered (or abandoned) the request.
func (s *Server) serveFault(w http.ResponseWriter, r *http.Request, path string, isMetrics, asJSON bool) bool {
	key := map[bool]string{false: listPath, true: metricsPath}[isMetrics]
	format := fakecore.Format{
		ContentType: contentTypeText,
		Status500: func(w http.ResponseWriter) {
			writeAPIError(w, http.StatusInternalServerError, "Internal error (fake fault) on "+path, s.clock.Now(), s.clock)
		},
		Garbage:     "# TYPE instance_cpu_time_s counter\ninstance_cpu_time_s{instance_uuid= 1.2.3 oops\n\x00\xff",
		StallPrefix: "# HELP ",
		Render: func() (int, []byte) {
			rec := httptest.NewRecorder()
			s.serveData(rec, r, path, isMetrics, asJSON, s.clock.Now())
			return rec.Code, rec.Body.Bytes()
		},
	}
	if asJSON {
		format.ContentType = contentTypeJSON
		format.Garbage = `{"status":"success","data":{"instances":[{"uuid":` + "\x00\xff{{"
		format.StallPrefix = `{"status":"success","data":{"instances":[`
	}
	rs := fakecore.Responder{Clock: s.clock, Stop: s.closed}
	for _, f := range s.Faults() {
		switch {
		case f.Path != "" && f.Path != key:
		case f.Kind == fakecore.FaultSlow:
			rs.Wait(r.Context(), f.Delay.Duration)
		case f.Kind == FaultHostileText:
			fakecore.StreamBody(r.Context(), w, contentTypeText, WideLine(100_000), f.Bytes)
			return true
		case rs.Serve(w, r, f.Kind, f.Bytes, format):
			return true
		}
	}
	return false
}

// WideLine is one line of Prometheus text with n labels besides
// instance_uuid: l0="v" ... l<n-1>="v". The hostile-text fault serves it
// with 100,000.
func WideLine(n int) []byte {
	line := bytes.NewBufferString(`instance_cpu_time_s{instance_uuid="hostile"`)
	for i := range n {
		fmt.Fprintf(line, `,l%d="v"`, i)
	}
	line.WriteString("} 1\n")
	return line.Bytes()
}

// resetCounters restarts the CPU counter of every running instance from
// zero and counts a start, but keeps started_at: what a wake from standby
// looks like when the platform does not move started_at.
func (s *Server) resetCounters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for _, in := range s.instances {
		if in.runs() {
			in.StartCount++
			in.upNS = in.uptime(now) // uptime goes on over the reset
			in.cpuNS, in.since = 0, now
		}
	}
}

// dataFaults are the data faults in force; offset moves every reported time
// back.
type dataFaults struct {
	offset           time.Duration
	duplicate, older bool
}

// dataFaultsLocked reads the data faults; s.mu must be held.
func (s *Server) dataFaultsLocked() dataFaults {
	d := dataFaults{offset: s.faults[fakecore.FaultClockBackwards].Offset.Duration - s.faults[FaultClockOffset].Offset.Duration}
	_, d.duplicate = s.faults[FaultDuplicateInstances]
	_, d.older = s.faults[FaultOlderForm]
	return d
}

// rfc3339 formats a reported wall-clock time; "" for none.
func (d dataFaults) rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Add(-d.offset).UTC().Format(time.RFC3339)
}

// duplicateUUID names the copy DuplicateInstances reports of an instance:
// it sorts after every UUID the server generates, so it loses a tie on UUID
// order.
func duplicateUUID(uuid string) string { return "ffffffff-dup-" + uuid }

// olderEntries are entries in the JSON form of older ukpd releases, as the
// platform's tutorial shows it.
func olderEntries(entries []metricsEntry) []map[string]any {
	out := make([]map[string]any, 0, len(entries))
	for _, e := range entries {
		m := map[string]any{"status": e.Status, "uuid": e.UUID, "name": e.Name, "state": e.State, "start_count": e.StartCount,
			"uptime_s": float64(e.UptimeMS) / 1e3, "rss_bytes": e.RSSBytes, "cpu_time_s": e.cpuLastSecond}
		if e.StartedAt != "" {
			m["started_at"] = e.StartedAt
		}
		out = append(out, m)
	}
	return out
}
