package fakeukpd

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestListPages(t *testing.T) {
	h := newHarness(t, Config{PageSize: 3})
	var uuids []string
	for i := range 7 {
		in := h.add(t, InstanceSpec{Namespace: "ns", Pod: fmt.Sprintf("p-%d", i), Container: "c"})
		uuids = append(uuids, in.UUID)
		h.clk.Step(time.Second)
	}
	page := func(query string) []string {
		t.Helper()
		code, _, body := h.get(t, listPath+query, "application/json")
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", query, code, body)
		}
		var out []string
		for _, e := range decodeEnvelope[listEntry](t, body) {
			out = append(out, e.UUID)
		}
		return out
	}
	tests := []struct {
		query string
		want  []string
	}{
		{"", uuids[:3]}, // the server's page, whatever the account holds
		{"?count=2", uuids[:2]},
		{"?count=100", uuids[:3]},
		{"?count=3&from=" + uuids[2], uuids[2:5]}, // from is inclusive
		{"?count=3&from=" + uuids[6], uuids[6:]},
		{"?count=3&from=2026-12-01T10:00:04Z", uuids[4:7]},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, page(tc.query)); diff != "" {
			t.Errorf("GET %s (-want +got):\n%s", tc.query, diff)
		}
	}
	for _, bad := range []string{"?from=nope", "?count=-1", "?count=x"} {
		if code, _, _ := h.get(t, listPath+bad, "application/json"); code != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400", bad, code)
		}
	}
}

// TestUptimeAccumulates checks uptime as the platform reports it: summed
// over every start, standing still while the instance does not run.
func TestUptimeAccumulates(t *testing.T) {
	h := newHarness(t, Config{})
	in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1})
	metrics := func() metricsEntry {
		t.Helper()
		got := getMetrics[metricsEntry](t, h)
		if len(got) != 1 {
			t.Fatalf("metrics = %+v", got)
		}
		return got[0]
	}
	h.clk.Step(4 * time.Second)
	must(t, h.s.Standby(in.UUID))
	h.clk.Step(time.Minute)
	if e := metrics(); e.UptimeMS != 4000 || e.CPUTimeMS != 4000 || e.State != StateStandby {
		t.Errorf("in standby: %+v, want uptime and CPU time 4 s", e)
	}
	must(t, h.s.Restart(in.UUID))
	h.clk.Step(2500 * time.Millisecond)
	if e := metrics(); e.UptimeMS != 6500 || e.CPUTimeMS != 2500 || e.StartCount != 2 {
		t.Errorf("after a wake: %+v, want uptime 6.5 s, CPU time 2.5 s since the wake", e)
	}
	must(t, h.s.Drain(in.UUID))
	h.clk.Step(time.Second)
	if e := metrics(); e.State != StateDraining || e.UptimeMS != 7500 || e.CPUTimeMS != 3500 {
		t.Errorf("draining: %+v, want it still running", e)
	}
}
