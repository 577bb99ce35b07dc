package fakeukpd

import (
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
		{name: "limited to the list", faultPath: listPath, path: metricsPath, wantCode: 200},
		{name: "on the list", faultPath: listPath, path: listPath, wantCode: 500},
		{name: "per-instance metrics count as metrics", faultPath: metricsPath, path: "/v1/instances/p-c-1/metrics", wantCode: 500},
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
	secure, err := Start(Options{CertDir: t.TempDir()})
	must(t, err)
	defer func() { _ = secure.Close() }()
	plain, err := Start(Options{})
	must(t, err)
	defer func() { _ = plain.Close() }()
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
func dataHarness(t *testing.T) (*harness, Instance) {
	h := newHarness(t, Config{})
	in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1, RSSBytes: 1 << 20})
	h.add(t, InstanceSpec{Namespace: "ns", Pod: "q", Container: "c", State: StateStopped, UUID: "stopped"})
	h.clk.Step(10 * time.Second)
	return h, in
}

func TestDuplicateInstancesFault(t *testing.T) {
	h, in := dataHarness(t)
	must(t, h.s.SetFault(Fault{Kind: FaultDuplicateInstances}))
	type sample struct {
		UUID, StartedAt      string
		StartCount, RSSBytes uint64
		CPUTimeMS            int64
	}
	var got []sample
	for _, e := range getMetrics[metricsEntry](t, h) {
		got = append(got, sample{e.UUID, e.StartedAt, e.StartCount, e.RSSBytes, e.CPUTimeMS})
	}
	want := []sample{
		{UUID: in.UUID, StartCount: 1, StartedAt: at, CPUTimeMS: 10000, RSSBytes: 1 << 20},
		{UUID: duplicateUUID(in.UUID), StartCount: 1, StartedAt: at, CPUTimeMS: 20000, RSSBytes: 2 << 20},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
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
	h, _ := dataHarness(t)
	for offset, want := range map[time.Duration]string{30 * time.Second: "2026-12-01T10:00:30Z", -30 * time.Second: "2026-12-01T09:59:30Z"} {
		must(t, h.s.SetFault(ClockOffset(offset)))
		if e := getMetrics[metricsEntry](t, h)[0]; e.StartedAt != want || e.UptimeMS != 10000 {
			t.Errorf("offset %s: started_at %s, uptime %d ms; want %s, 10000", offset, e.StartedAt, e.UptimeMS, want)
		}
	}
}

func TestOlderFormFault(t *testing.T) {
	h, in := dataHarness(t)
	must(t, h.s.SetFault(Fault{Kind: FaultOlderForm}))
	want := []olderEntry{{
		Status: "success", UUID: in.UUID, Name: "p-c-1", State: StateRunning, StartCount: 1,
		StartedAt: at, UptimeS: 10, CPUTimeS: 1, RSSBytes: 1 << 20,
	}}
	if diff := cmp.Diff(want, getMetrics[olderEntry](t, h)); diff != "" {
		t.Errorf("older form (-want +got):\n%s", diff)
	}
}
