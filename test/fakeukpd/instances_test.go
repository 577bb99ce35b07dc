package fakeukpd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// sample is what the lifecycle tests read of an instance's JSON metrics.
type sample struct {
	State                string
	UptimeMS, CPUTimeMS  int64
	RSSBytes, StartCount uint64
	StartedAt            string
}

// step changes the instance id with do (unless nil), lets time pass, and
// reads the metrics of every instance.
type step struct {
	name  string
	do    func(id string) error
	after time.Duration
	want  []sample
}

func runSteps(t *testing.T, h *harness, id string, steps []step) {
	t.Helper()
	for _, st := range steps {
		if st.do != nil {
			must(t, st.do(id))
		}
		h.clk.Step(st.after)
		var got []sample
		for _, e := range getMetrics[metricsEntry](t, h) {
			got = append(got, sample{e.State, e.UptimeMS, e.CPUTimeMS, e.RSSBytes, e.StartCount, e.StartedAt})
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
	}
}

const at = "2026-12-01T10:00:00Z"

func TestMetricsLifecycle(t *testing.T) {
	h := newHarness(t, Config{})
	in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 0.5, RSSBytes: 1 << 20})
	newRate := func(id string) error { return errors.Join(h.s.SetCPU(id, 2), h.s.SetRSS(in.Name, 2<<20)) }
	runSteps(t, h, in.UUID, []step{
		{"running", nil, 10 * time.Second, []sample{{StateRunning, 10000, 5000, 1 << 20, 1, at}}},
		{"new rate", newRate, 1500 * time.Millisecond, []sample{{StateRunning, 11500, 8000, 2 << 20, 1, at}}},
		{"standby", h.s.Standby, time.Minute, []sample{{StateStandby, 11500, 8000, 0, 1, at}}},
		{"woken", h.s.Restart, 2 * time.Second, []sample{{StateRunning, 13500, 4000, 2 << 20, 2, "2026-12-01T10:01:11Z"}}},
		{"stopped instance left out of the metrics", h.s.Stop, 0, nil},
	})
	must(t, h.s.Remove(in.UUID))
	if _, _, body := h.get(t, listPath, ""); len(decodeEnvelope[listEntry](t, body)) != 0 {
		t.Errorf("removed instance still listed: %s", body)
	}
	if err := h.s.Restart(in.UUID); !errors.Is(err, fakecore.ErrNotFound) {
		t.Errorf("Restart of a removed instance: %v, want ErrNotFound", err)
	}
}

func TestAddInstanceRejects(t *testing.T) {
	h := newHarness(t, Config{})
	h.add(t, InstanceSpec{UUID: "u1", Name: "one", Namespace: "ns", Pod: "p", Container: "c"})
	tests := []struct {
		name    string
		spec    InstanceSpec
		wantErr string
	}{
		{name: "no pod", spec: InstanceSpec{Namespace: "ns", Container: "c"}, wantErr: "needs a namespace, pod and container"},
		{name: "negative CPU", spec: InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: -1}, wantErr: "not a non-negative number"},
		{name: "bad state", spec: InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", State: "asleep"}, wantErr: `unknown state "asleep"`},
		{name: "same uuid", spec: InstanceSpec{UUID: "u1", Namespace: "ns", Pod: "p", Container: "c"}, wantErr: "exists"},
		{name: "same name", spec: InstanceSpec{Name: "one", Namespace: "ns", Pod: "p", Container: "c"}, wantErr: "exists"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := h.s.AddInstance(tc.spec); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("AddInstance error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestKraftletTag(t *testing.T) {
	long := strings.Repeat("p", 300)
	tests := []struct{ key, value, want string }{
		{TagPod, "web-0", "k8s.io:pod=web-0"},
		{TagNode, "node 1/é", "kraftlet:node=node_1__"},
		{TagPod, long, "k8s.io:pod=" + long[:256-len("k8s.io:pod=")]},
	}
	for _, tc := range tests {
		if got := KraftletTag(tc.key, tc.value); got != tc.want {
			t.Errorf("KraftletTag(%q, %q) = %q, want %q", tc.key, tc.value, got, tc.want)
		}
	}
}

// TestUptimeAccumulates checks uptime as the platform reports it: summed
// over every start, standing still while the instance does not run.
func TestUptimeAccumulates(t *testing.T) {
	h := newHarness(t, Config{})
	in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1})
	runSteps(t, h, in.UUID, []step{
		{"running", nil, 4 * time.Second, []sample{{StateRunning, 4000, 4000, 0, 1, at}}},
		{"in standby: uptime and CPU time 4 s", h.s.Standby, time.Minute, []sample{{StateStandby, 4000, 4000, 0, 1, at}}},
		{"after a wake: uptime 6.5 s, CPU time 2.5 s since the wake", h.s.Restart, 2500 * time.Millisecond,
			[]sample{{StateRunning, 6500, 2500, 0, 2, "2026-12-01T10:01:04Z"}}},
		{"draining: still running", h.s.Drain, time.Second, []sample{{StateDraining, 7500, 3500, 0, 2, "2026-12-01T10:01:04Z"}}},
	})
}
