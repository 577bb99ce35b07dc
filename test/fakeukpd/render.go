package fakeukpd

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// listEntry is an instance as GET /v1/instances describes it (some of the
// documented fields).
type listEntry struct {
	Status        string   `json:"status"`
	UUID          string   `json:"uuid"`
	Name          string   `json:"name"`
	CreatedAt     string   `json:"created_at"`
	State         string   `json:"state"`
	Image         string   `json:"image"`
	MemoryMB      int      `json:"memory_mb"`
	VCPUs         int      `json:"vcpus"`
	StartCount    uint64   `json:"start_count"`
	StartedAt     string   `json:"started_at,omitempty"`
	StoppedAt     string   `json:"stopped_at,omitempty"`
	UptimeMS      int64    `json:"uptime_ms"`
	RestartPolicy string   `json:"restart_policy"`
	Tags          []string `json:"tags,omitempty"`
}

// metricsEntry is an instance as GET /v1/instances/metrics describes it in
// JSON (some of the documented fields).
type metricsEntry struct {
	Status     string `json:"status"`
	UUID       string `json:"uuid"`
	Name       string `json:"name"`
	State      string `json:"state"`
	StartCount uint64 `json:"start_count"`
	StartedAt  string `json:"started_at,omitempty"`
	StoppedAt  string `json:"stopped_at,omitempty"`
	UptimeMS   int64  `json:"uptime_ms"`
	BootTimeUS int64  `json:"boot_time_us,omitempty"`
	NetTimeUS  int64  `json:"net_time_us,omitempty"`
	RSSBytes   uint64 `json:"rss_bytes"`
	CPUTimeMS  int64  `json:"cpu_time_ms"`
	RxBytes    int64  `json:"rx_bytes"`
	RxPackets  int64  `json:"rx_packets"`
	TxBytes    int64  `json:"tx_bytes"`
	TxPackets  int64  `json:"tx_packets"`
	NConns     int    `json:"nconns"`
	NReqs      int    `json:"nreqs"`
	NQueued    int    `json:"nqueued"`
	NTotal     int64  `json:"ntotal"`
	// cpuLastSecond is the CPU time over the last second (older form).
	cpuLastSecond float64
}

func (in *instance) stoppedAt(df dataFaults) string {
	if in.runs() {
		return ""
	}
	return df.rfc3339(in.stopped)
}

func (s *Server) writeList(w http.ResponseWriter, r *http.Request, start time.Time) {
	s.mu.Lock()
	now := s.clock.Now()
	df := s.dataFaultsLocked()
	chosen, err := s.pageLocked(r.URL.Query())
	if err != nil {
		s.mu.Unlock()
		writeAPIError(w, http.StatusBadRequest, err.Error(), start, s.clock)
		return
	}
	s.listRequests++
	entries := make([]listEntry, 0, len(chosen))
	for _, in := range chosen {
		e := listEntry{Status: "success", UUID: in.UUID, Name: in.Name, CreatedAt: df.rfc3339(in.createdAt), State: in.State,
			Image: "fake.unikraft.io/" + cmp.Or(in.Container, "app") + ":latest", MemoryMB: 256,
			VCPUs: max(1, int(math.Ceil(in.maxCores))), StartCount: in.StartCount, StartedAt: df.rfc3339(in.StartedAt),
			StoppedAt: in.stoppedAt(df), UptimeMS: in.uptime(now).Milliseconds(), RestartPolicy: "never", Tags: in.Tags}
		entries = append(entries, e)
		if df.duplicate && in.runs() {
			e.UUID, e.Name = duplicateUUID(in.UUID), in.Name+"-dup"
			entries = append(entries, e)
		}
	}
	s.mu.Unlock()
	writeEnvelope(w, entries, start, s.clock)
}

// pageLocked picks the instances a list request asks for, oldest first:
// from the instance that "from" names (its UUID, or an RFC 3339 creation
// time), inclusive, at most "count" of them (0 or none: all), and never more
// than the server's page size.
func (s *Server) pageLocked(q url.Values) ([]*instance, error) {
	all := s.sortedLocked()
	slices.SortStableFunc(all, func(a, b *instance) int {
		return cmp.Or(a.createdAt.Compare(b.createdAt), cmp.Compare(a.seq, b.seq))
	})
	if from := q.Get("from"); from != "" && !s.ignoreFrom {
		// A copy that DuplicateInstances reports stands for its original.
		from = strings.TrimPrefix(from, duplicateUUID(""))
		i := slices.IndexFunc(all, func(in *instance) bool { return in.UUID == from })
		if i < 0 {
			t, err := time.Parse(time.RFC3339, from)
			if err != nil {
				return nil, fmt.Errorf("no instance %q", from)
			}
			i, _ = slices.BinarySearchFunc(all, t, func(in *instance, t time.Time) int { return in.createdAt.Compare(t) })
		}
		all = all[i:]
	}
	limit := s.pageSize
	if c := q.Get("count"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("count %q is not a count", c)
		}
		if n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
	}
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	return all, nil
}

// metrics returns the entries of the instances ids names (UUIDs or names),
// or of all, but stopped ones; ok is false when an id names no instance.
func (s *Server) metrics(ids []string) (_ []metricsEntry, older, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	df := s.dataFaultsLocked()
	var chosen []*instance
	if len(ids) == 0 {
		chosen = s.sortedLocked()
	}
	for _, id := range ids {
		in := s.find(id)
		if in == nil {
			return nil, false, false
		}
		chosen = append(chosen, in)
	}
	out := make([]metricsEntry, 0, len(chosen))
	for _, in := range chosen {
		if in.State == StateStopped {
			continue
		}
		e := metricsEntry{Status: "success", UUID: in.UUID, Name: in.Name, State: in.State, StartCount: in.StartCount,
			StartedAt: df.rfc3339(in.StartedAt), StoppedAt: in.stoppedAt(df), UptimeMS: in.uptime(now).Milliseconds(),
			BootTimeUS: 9000, NetTimeUS: 12000, CPUTimeMS: in.cpuTimeMS(now)}
		if in.runs() {
			e.RSSBytes, e.cpuLastSecond = in.RSSBytes, in.CPUCores
		}
		out = append(out, e)
		if df.duplicate && in.runs() {
			// The same pod and container, twice the CPU time and memory.
			e.UUID, e.Name = duplicateUUID(in.UUID), in.Name+"-dup"
			e.CPUTimeMS, e.RSSBytes = 2*e.CPUTimeMS, 2*e.RSSBytes
			out = append(out, e)
		}
	}
	return out, df.older, true
}

// writeEnvelope answers {"status": "success", "data": {"instances": ...}}.
func writeEnvelope[T any](w http.ResponseWriter, instances []T, start time.Time, clk clock.PassiveClock) {
	w.Header().Set("Content-Type", contentTypeJSON)
	writeJSON(w, struct {
		Status   string         `json:"status"`
		Data     map[string][]T `json:"data"`
		OpTimeUS int64          `json:"op_time_us"`
	}{"success", map[string][]T{"instances": instances}, opTime(start, clk)})
}

// stateCode numbers states as the instance_state HELP line documents.
var stateCode = map[string]int{
	StateStopped: 0, "starting": 1, StateRunning: 2, StateDraining: 3, "stopping": 4, StateStandby: 5,
}

// family is one metric family of the Prometheus form.
type family struct {
	name, help, kind string
	value            func(e *metricsEntry) string
}

var families = []family{
	{"instance_state", "0=stopped,1=starting,2=running,3=draining,4=stopping,5=standby,6=template,7=deleted", "gauge", func(e *metricsEntry) string { return strconv.Itoa(stateCode[e.State]) }},
	{"instance_start_count", "Number of times the instance has been started", "counter", func(e *metricsEntry) string { return strconv.FormatUint(e.StartCount, 10) }},
	{"instance_restart_count", "Number of times the instance has been restarted", "counter", zero},
	{"instance_started_at", "Time when the instance started", "gauge", func(e *metricsEntry) string { return unixSeconds(e.StartedAt) }},
	{"instance_stopped_at", "Time when the instance stopped", "gauge", func(e *metricsEntry) string { return unixSeconds(e.StoppedAt) }},
	{"instance_uptime_s", "Uptime in seconds", "gauge", func(e *metricsEntry) string { return millis(e.UptimeMS) }},
	{"instance_rss_bytes", "Resident set size in bytes", "gauge", func(e *metricsEntry) string { return strconv.FormatUint(e.RSSBytes, 10) }},
	{"instance_cpu_time_s", "Consumed CPU time in seconds", "counter", func(e *metricsEntry) string { return millis(e.CPUTimeMS) }},
	// The network fields stay zero.
	{"instance_rx_bytes", "Amount of bytes received over network", "counter", zero},
	{"instance_tx_bytes", "Amount of bytes transmitted over network", "counter", zero},
	{"instance_nconns", "Number of active connections", "gauge", zero},
}

func zero(*metricsEntry) string { return "0" }

func millis(ms int64) string { return fmt.Sprintf("%d.%06d", ms/1000, (ms%1000)*1000) }

func unixSeconds(rfc string) string {
	t, err := time.Parse(time.RFC3339, rfc)
	if err != nil {
		return "0"
	}
	return strconv.FormatInt(t.Unix(), 10)
}

// writeText writes the Prometheus text form; a failed write means the
// client went away.
func writeText(w io.Writer, entries []metricsEntry) {
	bw := bufio.NewWriter(w)
	defer func() { _ = bw.Flush() }()
	for i, f := range families {
		if i > 0 {
			fmt.Fprintln(bw)
		}
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.kind)
		for j := range entries {
			fmt.Fprintf(bw, "%s{instance_uuid=%q} %s\n", f.name, entries[j].UUID, f.value(&entries[j]))
		}
	}
}
