package fakeukpd

import (
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

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

// dataFaults are the data faults in force; s.mu must be held.
type dataFaults struct {
	// offset is how far every reported wall-clock time is moved back.
	offset time.Duration
	// duplicate reports a second instance for each running one.
	duplicate bool
	// older answers the JSON metrics in the older form.
	older bool
}

func (s *Server) dataFaultsLocked() dataFaults {
	var d dataFaults
	if f, ok := s.faults[fakecore.FaultClockBackwards]; ok {
		d.offset = f.Offset.Duration
	}
	if f, ok := s.faults[FaultClockOffset]; ok {
		d.offset -= f.Offset.Duration
	}
	_, d.duplicate = s.faults[FaultDuplicateInstances]
	_, d.older = s.faults[FaultOlderForm]
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

// olderEntry is a metrics entry in the JSON form of older ukpd releases, as
// the platform's instance-metrics tutorial shows it.
type olderEntry struct {
	Status     string  `json:"status"`
	UUID       string  `json:"uuid"`
	Name       string  `json:"name"`
	State      string  `json:"state"`
	StartCount uint64  `json:"start_count"`
	StartedAt  string  `json:"started_at,omitempty"`
	UptimeS    float64 `json:"uptime_s"`
	RSSBytes   uint64  `json:"rss_bytes"`
	CPUTimeS   float64 `json:"cpu_time_s"`
}

func olderEntries(entries []metricsEntry) []olderEntry {
	out := make([]olderEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, olderEntry{
			Status: e.Status, UUID: e.UUID, Name: e.Name, State: e.State,
			StartCount: e.StartCount, StartedAt: e.StartedAt, UptimeS: float64(e.UptimeMS) / 1e3,
			RSSBytes: e.RSSBytes, CPUTimeS: e.cpuLastSecond,
		})
	}
	return out
}
