package fakeukpd

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// The faults both fakes have are tested in fakecore's TestFaults.

func TestFaultPaths(t *testing.T) {
	h := newHarness(t, Config{})
	h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c"})
	tests := []struct {
		name, path, faultPath string
		wantCode              int
	}{
		{"limited to the list", metricsPath, listPath, 200},
		{"on the list", listPath, listPath, 500},
		{"per-instance metrics count as metrics", "/v1/instances/p-c-1/metrics", metricsPath, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			must(t, h.s.SetFault(Fault{Kind: fakecore.FaultStatus500, Path: tc.faultPath}))
			defer h.s.ClearFault("")
			if code, ct, _ := h.get(t, tc.path, contentTypeJSON); code != tc.wantCode || ct != contentTypeJSON {
				t.Errorf("GET %s = %d %q, want %d JSON", tc.path, code, ct, tc.wantCode)
			}
		})
	}
}

func TestFaultRejects(t *testing.T) {
	h := newHarness(t, Config{})
	for _, f := range []Fault{
		{Kind: fakecore.FaultGarbage, Path: "/v1/images"},
		{Kind: fakecore.FaultClockBackwards, Offset: metav1.Duration{Duration: time.Minute}, Path: listPath},
		ClockOffset(0),
	} {
		if err := h.s.SetFault(f); err == nil {
			t.Errorf("SetFault(%+v) accepted", f)
		}
	}
	start := func(opts Options) *Running {
		r, err := Start(opts)
		must(t, err)
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	secure, plain := start(Options{CertDir: t.TempDir()}), start(Options{})
	for _, k := range []FaultKind{fakecore.FaultStatus500, "Melt"} {
		if err := secure.SetTransportFault(k); err == nil {
			t.Errorf("SetTransportFault(%s) accepted", k)
		}
	}
	if err := plain.SetTransportFault(fakecore.FaultUntrustedCertificate); err == nil {
		t.Error("SetTransportFault accepted over plain HTTP")
	}
}

func TestHostileText(t *testing.T) {
	h := newHarness(t, Config{})
	must(t, h.s.SetFault(Fault{Kind: FaultHostileText, Bytes: 3 << 20}))
	code, ct, body := h.get(t, metricsPath, contentTypeJSON)
	if code != 200 || ct != contentTypeText || len(body) != 3<<20 {
		t.Fatalf("GET = %d %q, %d bytes; want 200, text, 3 MiB", code, ct, len(body))
	}
	line, _, _ := strings.Cut(body, "\n")
	if n := strings.Count(line, `="v"`); n != 100_000 {
		t.Errorf("first line has %d labels, want 100,000", n)
	}
}

// dataHarness serves one running instance, 10s after it started, and a
// stopped one.
func dataHarness(t *testing.T, cfg Config) (*harness, Instance) {
	h := newHarness(t, cfg)
	in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1, RSSBytes: 1 << 20})
	h.add(t, InstanceSpec{Namespace: "ns", Pod: "q", Container: "c", State: StateStopped, UUID: "stopped"})
	h.clk.Step(10 * time.Second)
	return h, in
}

func TestDuplicateInstancesFault(t *testing.T) {
	h, in := dataHarness(t, Config{})
	must(t, h.s.SetFault(Fault{Kind: FaultDuplicateInstances}))
	var got []string
	for _, e := range getMetrics[metricsEntry](t, h) {
		got = append(got, fmt.Sprintln(e.UUID, e.StartedAt, e.StartCount, e.RSSBytes, e.CPUTimeMS))
	}
	want := []string{fmt.Sprintln(in.UUID, at, 1, 1<<20, 10000), fmt.Sprintln(duplicateUUID(in.UUID), at, 1, 2<<20, 20000)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (uuid, started_at, start_count, rss_bytes, cpu_time_ms) (-want +got):\n%s", diff)
	}
	// The copy is listed with the same tags, so it is attributed to the
	// same pod and container.
	_, _, body := h.get(t, listPath, "")
	list := decodeEnvelope[listEntry](t, body)
	if len(list) != 3 || list[1].UUID != duplicateUUID(in.UUID) || list[1].Name != in.Name+"-dup" || !cmp.Equal(list[1].Tags, list[0].Tags) {
		t.Errorf("list: %+v", list)
	}
	h.s.ClearFault(FaultDuplicateInstances)
	if got := getMetrics[metricsEntry](t, h); len(got) != 1 {
		t.Errorf("after clearing: %+v", got)
	}
}

func TestClockOffsetFault(t *testing.T) {
	h, _ := dataHarness(t, Config{})
	for offset, want := range map[time.Duration]string{30 * time.Second: "2026-12-01T10:00:30Z", -30 * time.Second: "2026-12-01T09:59:30Z"} {
		must(t, h.s.SetFault(ClockOffset(offset)))
		if e := getMetrics[metricsEntry](t, h)[0]; e.StartedAt != want || e.UptimeMS != 10000 {
			t.Errorf("offset %s: started_at %s, uptime %d ms; want %s, 10000", offset, e.StartedAt, e.UptimeMS, want)
		}
	}
}

// TestJSONForms checks the JSON metrics in each form but the page's,
// strict about every field: the older releases' (a fault, which wins over
// a form), the OpenAPI schema's and the Go SDK's.
func TestJSONForms(t *testing.T) {
	counters := map[string]any{"rx_bytes": 0.0, "rx_packets": 0.0, "tx_bytes": 0.0, "tx_packets": 0.0, "nconns": 0.0, "nreqs": 0.0, "nqueued": 0.0, "ntotal": 0.0}
	with := func(fields map[string]any) map[string]any {
		maps.Copy(fields, counters)
		return fields
	}
	const uuid = "00000000-0000-4000-8000-000000000001"
	older := map[string]any{"status": "success", "uuid": uuid, "name": "p-c-1", "state": StateRunning, "start_count": 1.0,
		"started_at": at, "uptime_s": 10.0, "rss_bytes": 1048576.0, "cpu_time_s": 1.0}
	tests := []struct {
		name  string
		form  JSONForm
		older bool
		want  map[string]any
	}{
		{name: "older releases", older: true, want: older},
		{name: "older releases over the SDK's form", form: JSONFormSDK, older: true, want: older},
		{name: "OpenAPI schema", form: JSONFormSchema,
			want: with(map[string]any{"status": "success", "uuid": uuid, "name": "p-c-1", "rss_bytes": 1048576.0, "cpu_time_ms": 10000.0})},
		{name: "Go SDK", form: JSONFormSDK,
			want: with(map[string]any{"status": "success", "rss_bytes": 1048576.0, "cpu_time_ms": 10000.0, "boot_time_us": 9000.0, "net_time_us": 12000.0})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := dataHarness(t, Config{JSONForm: tc.form})
			if tc.older {
				must(t, h.s.SetFault(Fault{Kind: FaultOlderForm}))
			}
			if diff := cmp.Diff([]map[string]any{tc.want}, getMetrics[map[string]any](t, h)); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
}
