package ukpd

import (
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

const validList = `{"status": "success", "data": {"instances": [
  {"status": "success", "uuid": "6a0c3f0e-0b4f-4c52-9d35-2f6f0f5f3a01", "name": "web-0-app-x1", "created_at": "2026-11-30T08:00:00Z",
   "state": "running", "image": "example/web:1", "memory_mb": 256, "vcpus": 1,
   "tags": ["k8s.io:namespace=default", "k8s.io:pod=web-0", "k8s.io:container=app", "kraftlet:node=kraftlet-a"]},
  {"status": "success", "uuid": "6a0c3f0e-0b4f-4c52-9d35-2f6f0f5f3a02", "name": "batch-7", "state": "standby",
   "scale_to_zero": {"enabled": true, "policy": "on", "cooldown_time_ms": 1000}}
]}, "op_time_us": 321}`

func TestDecodeInstances(t *testing.T) {
	runDecodeCases(t, DecodeInstances, []decodeCase[Instance]{
		{
			name: "documented envelope",
			body: validList,
			want: []Instance{
				{UUID: "6a0c3f0e-0b4f-4c52-9d35-2f6f0f5f3a01", Name: "web-0-app-x1", State: "running", VCPUs: 1,
					Tags: []string{"k8s.io:namespace=default", "k8s.io:pod=web-0", "k8s.io:container=app", "kraftlet:node=kraftlet-a"}},
				{UUID: "6a0c3f0e-0b4f-4c52-9d35-2f6f0f5f3a02", Name: "batch-7", State: "standby"},
			},
		},
		{name: "empty list left out", body: `{"status": "success", "data": {}, "op_time_us": 3}`, want: []Instance{}},
		{name: "no data at all", body: `{"status": "success"}`, want: []Instance{}},
		{name: "bare instances array", body: `{"instances": [{"uuid": "u1", "state": "running"}]}`, want: []Instance{{UUID: "u1", State: "running"}}},
		{
			name:    "bad entries cost only themselves",
			body:    `{"status": "partial_success", "data": {"instances": [{"uuid": 7}, {"name": "no-uuid"}, {"uuid": "u1"}, {"uuid": "u1"}, {"status": "error", "uuid": "u2", "message": "gone"}, {"uuid": "u3", "tags": ["a=b"]}]}}`,
			want:    []Instance{{UUID: "u1"}, {UUID: "u3", Tags: []string{"a=b"}}},
			wantErr: "left out 4 entries",
		},
	})
}

func TestDecodeRejectsEnvelope(t *testing.T) {
	tests := []struct {
		name, body, wantErr, wantReason string
	}{
		{name: "empty", body: ``, wantErr: "not a JSON object", wantReason: sources.ReasonDecode},
		{name: "array", body: `[{"uuid": "u1"}]`, wantErr: "not a JSON object", wantReason: sources.ReasonDecode},
		{name: "truncated", body: `{"status": "success", "data": {"instances": [`, wantErr: "unexpected end", wantReason: sources.ReasonDecode},
		{name: "instances not a list", body: `{"data": {"instances": {"uuid": "u1"}}}`, wantErr: "cannot unmarshal", wantReason: sources.ReasonDecode},
		{name: "unknown status", body: `{"status": "maybe"}`, wantErr: `unknown status "maybe"`, wantReason: sources.ReasonDecode},
		{name: "status error", body: `{"status": "error", "message": "Unauthorized"}`, wantErr: "API answered status error: Unauthorized", wantReason: sources.ReasonHTTPStatus},
		{name: "status failure is an API error, not a decode error", body: `{"status": "failure", "message": "metro unavailable"}`,
			wantErr: "API answered status failure: metro unavailable", wantReason: sources.ReasonHTTPStatus},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			list, err := DecodeInstances([]byte(tc.body))
			checkRejected(t, list, err, tc.wantErr, tc.wantReason)
			samples, err := DecodeMetricsJSON([]byte(tc.body))
			checkRejected(t, samples, err, tc.wantErr, tc.wantReason)
		})
	}
}

const validMetricsJSON = `{"status": "success", "data": {"instances": [
  {"status": "success", "uuid": "6a0c3f0e-0b4f-4c52-9d35-2f6f0f5f3a01", "name": "web-0-app-x1", "state": "running",
   "start_count": 3, "restart_count": 1, "started_at": "2026-12-01T09:00:00Z", "uptime_ms": 3600000,
   "rss_bytes": 52428800, "cpu_time_ms": 1800250, "rx_bytes": 100, "tx_bytes": 200, "nconns": 1, "ntotal": 9,
   "wakeup_latency": [{"bucket_ms": 1, "count": 0}, {"bucket_ms": null, "count": 0}], "wakeup_latency_sum": 0},
  {"status": "success", "uuid": "6a0c3f0e-0b4f-4c52-9d35-2f6f0f5f3a02", "name": "batch-7", "state": "standby",
   "start_count": 2, "started_at": "2026-12-01T08:59:00.5Z", "stopped_at": "2026-12-01T09:10:00Z", "rss_bytes": 0, "cpu_time_ms": 150}
]}}`

func TestDecodeMetricsJSON(t *testing.T) {
	runDecodeCases(t, DecodeMetricsJSON, []decodeCase[Sample]{
		{
			name: "documented fields",
			body: validMetricsJSON,
			want: []Sample{
				{UUID: "6a0c3f0e-0b4f-4c52-9d35-2f6f0f5f3a01", Name: "web-0-app-x1", State: "running",
					CPUCoreNanos: 1800250 * 1e6, RSSBytes: 52428800, StartCount: 3, StartedAt: t0.Add(-time.Hour), Uptime: time.Hour, HasUptime: true},
				{UUID: "6a0c3f0e-0b4f-4c52-9d35-2f6f0f5f3a02", Name: "batch-7", State: "standby",
					CPUCoreNanos: 150 * 1e6, StartCount: 2, StartedAt: t0.Add(-61*time.Minute + 500*time.Millisecond)},
			},
		},
		{name: "zero values and omitted optional fields",
			body: `{"status": "success", "data": {"instances": [{"name": "only-name", "cpu_time_ms": 0, "rss_bytes": 0, "started_at": ""}]}}`,
			want: []Sample{{Name: "only-name"}}},
		{name: "empty", body: `{"status": "success", "data": {"instances": []}}`, want: []Sample{}},
		{
			name: "bad entries cost only themselves",
			body: `{"data": {"instances": [
				{"uuid": "a", "rss_bytes": 1},
				{"uuid": "b", "cpu_time_ms": 1},
				{"uuid": "c", "cpu_time_ms": -1, "rss_bytes": 1},
				{"uuid": "d", "cpu_time_ms": 1, "rss_bytes": 9000000000000000000},
				{"uuid": "e", "cpu_time_ms": 1.5, "rss_bytes": 1},
				{"uuid": "f", "cpu_time_ms": 1, "rss_bytes": 1, "started_at": "yesterday"},
				{"uuid": "g", "cpu_time_ms": 1, "rss_bytes": 1, "started_at": "1970-01-01T00:00:01Z"},
				{"uuid": "h", "cpu_time_ms": 1, "rss_bytes": 1, "start_count": -2},
				{"cpu_time_ms": 1, "rss_bytes": 1},
				{"status": "error", "uuid": "i", "message": "instance not found"},
				{"uuid": "ok", "cpu_time_ms": 1, "rss_bytes": 1},
				{"uuid": "ok", "cpu_time_ms": 2, "rss_bytes": 2},
				{"uuid": "j", "cpu_time_ms": 9223372036854775807, "rss_bytes": 1},
				{"uuid": "k", "cpu_time_ms": 1, "rss_bytes": 1, "uptime_ms": -1}
			]}}`,
			want:    []Sample{{UUID: "ok", CPUCoreNanos: 1e6, RSSBytes: 1}},
			wantErr: "left out 13 entries",
		},
		{name: "an older entry among current ones is named",
			body: `{"data": {"instances": [{"uuid": "a", "cpu_time_s": 0.2, "uptime_s": 3, "rss_bytes": 1}, {"uuid": "b", "cpu_time_ms": 1, "rss_bytes": 1}]}}`,
			want: []Sample{{UUID: "b", CPUCoreNanos: 1e6, RSSBytes: 1}}, wantErr: `instance "a": the entries carry cpu_time_s and no cpu_time_ms`},
	})
}

// TestDecodeSchemaForm: entries shaped as the platform's OpenAPI schema
// has them (unikraft-cloud/openapi platform.yaml at 3ad3989,
// instance_metrics: no state, start_count, started_at nor uptime_ms) are
// read; without uuid and name too, as the Go SDK has them (unikraft-cloud/
// go-sdk at 7f41cc0, GetInstancesMetricsResponseInstanceMetrics), the
// answer fails as a whole with one error that says so, rather than an
// empty scrape that would wipe the target's pods. Scraped from the fake in
// each shape, three times: the schema's serves the rate, the state coming
// from the list; the SDK's scrapes give no batch, so the store holds
// nothing.
func TestDecodeSchemaForm(t *testing.T) {
	entry := `"status": "success", "rss_bytes": 1048576, "cpu_time_ms": 1500, "rx_bytes": 10, "rx_packets": 1, "tx_bytes": 20, "tx_packets": 2, "nconns": 0, "nreqs": 0, "nqueued": 0, "ntotal": 3`
	samples, err := DecodeMetricsJSON([]byte(`{"status": "success", "data": {"instances": [{"uuid": "a", "name": "young-monkey", ` + entry + `}]}}`))
	if err != nil || len(samples) != 1 || samples[0].UUID != "a" || samples[0].CPUCoreNanos != 1500e6 || samples[0].RSSBytes != 1048576 {
		t.Errorf("with uuid and name: %+v, %v; want instance a's counter and RSS", samples, err)
	}
	samples, err = DecodeMetricsJSON([]byte(`{"status": "success", "data": {"instances": [{` + entry + `}, {` + entry + `}]}}`))
	checkRejected(t, samples, err, "the entries name no instance (no uuid and no name)", sources.ReasonDecode)
	// Entries that all fail for other reasons fail the answer too.
	samples, err = DecodeMetricsJSON([]byte(`{"status": "success", "data": {"instances": [{"uuid": "a", "rss_bytes": 1}]}}`))
	checkRejected(t, samples, err, "no cpu_time_ms", sources.ReasonDecode)

	for form, wantErr := range map[fakeukpd.JSONForm]string{fakeukpd.JSONFormSchema: "", fakeukpd.JSONFormSDK: "the entries name no instance"} {
		e, st := newWebEnv(t, func(c *fakeukpd.Config) { c.JSONForm = form }, 0.5, 1<<20)
		for range 3 {
			e.clk.Step(15 * time.Second)
			b, err := e.target.Scrape(t.Context())
			if checkErr(t, err, wantErr, sources.ReasonDecode); b != nil {
				st.Store(SourceName, e.target.Nodes(), b, e.clk.Now())
			}
		}
		u, _, why := st.Pod("default", "web-0", "uid-web-0", "kraftlet-a", store.PodRef{})
		if served := why == nil; served != (wantErr == "") || served && (u.Containers[0].CPUNanoCores != 500_000_000 || u.Containers[0].MemoryBytes != 1<<20) {
			t.Errorf("%s form: usage %+v (%v); want 0.5 cores and 1 MiB only without an error", form, u, why)
		}
	}
}

// TestDecodeOlderForm checks that the JSON form of older ukpd releases
// fails as a whole, with one error that says which form to use.
func TestDecodeOlderForm(t *testing.T) {
	body := `{"status": "success", "data": {"instances": [
		{"uuid": "a", "state": "running", "start_count": 1, "started_at": "2026-12-01T09:00:00Z", "uptime_s": 12.5, "rss_bytes": 1, "cpu_time_s": 0.25},
		{"uuid": "b", "state": "standby", "uptime_s": 3, "rss_bytes": 0, "cpu_time_s": 0}
	]}}`
	samples, err := DecodeMetricsJSON([]byte(body))
	checkRejected(t, samples, err, "JSON form of older ukpd releases, whose cpu_time_s is not a counter: ask for the Prometheus form with the endpoint option metrics-format=text", sources.ReasonDecode)
	if strings.Contains(err.Error(), "left out") {
		t.Errorf("error = %v, want one error, not one per entry", err)
	}
}

// TestDecodeNamesProblems checks that an error says which entry was left
// out and why, and names no more than maxReported of them.
func TestDecodeNamesProblems(t *testing.T) {
	_, err := DecodeMetricsJSON([]byte(`{"data": {"instances": [{"uuid": "x1", "rss_bytes": 1}]}}`))
	checkErr(t, err, `instance "x1": no cpu_time_ms`, sources.ReasonDecode)
	_, err = DecodeMetricsJSON([]byte(`{"data": {"instances": [` + strings.Repeat(`{"uuid": "bad"},`, 24) + `{"uuid": "bad"}]}}`))
	checkErr(t, err, "left out 25 entries", sources.ReasonDecode)
	checkErr(t, err, "and 15 more", sources.ReasonDecode)
}

// decodeCase is a body, what a decoder reads of it, and the error it
// gives, if any, of reason decode.
type decodeCase[T any] struct {
	name, body string
	want       []T
	wantErr    string
}

func runDecodeCases[T any](t *testing.T, decode func([]byte) ([]T, error), tests []decodeCase[T]) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decode([]byte(tc.body))
			checkErr(t, err, tc.wantErr, sources.ReasonDecode)
			checkDiff(t, "decode", tc.want, got)
		})
	}
}

// checkRejected checks that a decoder returned nothing, and an error
// containing want for wantReason.
func checkRejected[T any](t *testing.T, out []T, err error, want, wantReason string) {
	t.Helper()
	if out != nil {
		t.Errorf("returned %+v, want nothing", out)
	}
	checkErr(t, err, want, wantReason)
}

// FuzzDecodeInstances checks that no input crashes the decoder and that
// whatever it accepts has a unique UUID.
func FuzzDecodeInstances(f *testing.F) {
	f.Add([]byte(validList))
	f.Add([]byte(`{"status": "success", "data": {}}`))
	f.Add([]byte(`{"instances": [{"uuid": "u1"}, {"uuid": "u1"}]}`))
	f.Add([]byte(`{"status": "error", "message": "no"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		list, err := DecodeInstances(body)
		if rejected(t, list, err) {
			return
		}
		seen := map[string]bool{}
		for _, in := range list {
			if in.UUID == "" || seen[in.UUID] {
				t.Fatalf("accepted instance %+v", in)
			}
			seen[in.UUID] = true
		}
	})
}

// FuzzDecodeMetricsJSON checks that no input crashes the decoder and that
// whatever it accepts obeys the bounds the source relies on.
func FuzzDecodeMetricsJSON(f *testing.F) {
	f.Add([]byte(validMetricsJSON))
	f.Add([]byte(`{"data": {"instances": [{"uuid": "a", "cpu_time_ms": 1, "rss_bytes": 1, "started_at": "2026-01-01T00:00:00Z"}]}}`))
	f.Add([]byte(`{"instances": [{"name": "n", "cpu_time_ms": 4611686018427, "rss_bytes": 1125899906842624}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		samples, err := DecodeMetricsJSON(body)
		if rejected(t, samples, err) {
			return
		}
		checkSamples(t, samples)
	})
}

// rejected reports whether a decoder returned nothing, failing t if it
// did so without an error.
func rejected[T any](t *testing.T, out []T, err error) bool {
	t.Helper()
	if out == nil && err == nil {
		t.Fatal("nothing returned without an error")
	}
	return out == nil
}

func checkSamples(t *testing.T, samples []Sample) {
	t.Helper()
	seen := map[string]bool{}
	for _, s := range samples {
		k := sampleKey(s)
		if (s.UUID == "" && s.Name == "") || seen[k] || s.CPUCoreNanos > maxCPUCoreNanos || s.RSSBytes > maxRSSBytes ||
			(!s.StartedAt.IsZero() && s.StartedAt.Before(minTime)) {
			t.Fatalf("accepted implausible sample %+v", s)
		}
		seen[k] = true
	}
}
