package fakeukpd

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"
)

// serveTruncated answers 200 with the first half of what the server would
// have answered, declared and sent completely: the response ends cleanly,
// the document does not.
func (s *Server) serveTruncated(w http.ResponseWriter, r *http.Request, isMetrics, asJSON bool) {
	rec := httptest.NewRecorder()
	s.serveData(rec, r, strings.TrimSuffix(r.URL.Path, "/"), isMetrics, asJSON, s.clock.Now())
	body := rec.Body.Bytes()
	cut := body[:len(body)/2]
	w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
	w.Header().Set("Content-Length", strconv.Itoa(len(cut)))
	w.WriteHeader(rec.Code)
	_, _ = w.Write(cut)
}

// serveStall sends the headers and the start of a body, then nothing more
// until the request ends or the server closes, and abandons the response so
// that no client sees it complete.
func (s *Server) serveStall(w http.ResponseWriter, r *http.Request, asJSON bool) {
	if asJSON {
		w.Header().Set("Content-Type", contentTypeJSON)
		_, _ = io.WriteString(w, `{"status":"success","data":{"instances":[`)
	} else {
		w.Header().Set("Content-Type", contentTypeText)
		_, _ = io.WriteString(w, "# HELP ")
	}
	_ = http.NewResponseController(w).Flush()
	select {
	case <-r.Context().Done():
	case <-s.closed:
	}
	panic(http.ErrAbortHandler)
}

// resetCounters restarts the CPU counter of every running instance from
// zero and counts a start, but keeps started_at: what a wake from standby
// looks like when the platform does not move started_at.
func (s *Server) resetCounters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for _, in := range s.instances {
		if in.state == StateRunning {
			in.startCount++
			in.cpuNS, in.since = 0, now
		}
	}
}

// dataFaults are the data faults in force; s.mu must be held.
type dataFaults struct {
	// offset is how far every reported wall-clock time is moved back.
	offset time.Duration
	// duplicate reports a second instance for each running one.
	duplicate bool
}

func (s *Server) dataFaultsLocked() dataFaults {
	var d dataFaults
	if f, ok := s.faults[FaultClockBackwards]; ok {
		d.offset = f.Offset
	}
	_, d.duplicate = s.faults[FaultDuplicateInstances]
	return d
}

// back moves a reported wall-clock time back by the clock offset.
func (d dataFaults) back(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(-d.offset)
}

// duplicateUUID and duplicateName name the second instance that
// DuplicateInstances reports for an instance. The UUID sorts after every
// UUID the server generates, so it loses a tie on UUID order.
func duplicateUUID(uuid string) string { return "ffffffff-dup-" + uuid }
func duplicateName(name string) string { return name + "-dup" }
