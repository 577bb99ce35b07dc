package fakeukpd

import (
	"strings"
	"testing"
	"time"

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
			if code, ct, _ := h.get(t, tc.path, "application/json"); code != tc.wantCode || ct != contentTypeJSON {
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
	code, ct, body := h.get(t, metricsPath, "application/json")
	if code != 200 || ct != contentTypeText || len(body) != 3<<20 {
		t.Fatalf("GET = %d %q, %d bytes; want 200, text, 3 MiB", code, ct, len(body))
	}
	line, _, _ := strings.Cut(body, "\n")
	if n := strings.Count(line, `="v"`); n != 100_000 {
		t.Errorf("first line has %d labels, want 100,000", n)
	}
}
