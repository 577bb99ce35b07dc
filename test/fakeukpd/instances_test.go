package fakeukpd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		name, wantErr string
		spec          InstanceSpec
	}{
		{"no pod", "needs a namespace, pod and container", InstanceSpec{Namespace: "ns", Container: "c"}},
		{"negative CPU", "not a non-negative number", InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: -1}},
		{"bad state", `unknown state "asleep"`, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", State: "asleep"}},
		{"same uuid", "exists", InstanceSpec{UUID: "u1", Namespace: "ns", Pod: "p", Container: "c"}},
		{"same name", "exists", InstanceSpec{Name: "one", Namespace: "ns", Pod: "p", Container: "c"}},
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
// over every start, standing still while the instance does not run. So
// does CPU time with Config.CumulativeCPU (at 1 core, the uptime);
// without, it starts over at the wake.
func TestUptimeAccumulates(t *testing.T) {
	for _, cumulative := range []bool{false, true} {
		t.Run(fmt.Sprint("cumulative CPU ", cumulative), func(t *testing.T) {
			h := newHarness(t, Config{CumulativeCPU: cumulative})
			in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 1})
			cpu := func(uptime, sinceWake int64) int64 {
				if cumulative {
					return uptime
				}
				return sinceWake
			}
			runSteps(t, h, in.UUID, []step{
				{"running", nil, 4 * time.Second, []sample{{StateRunning, 4000, 4000, 0, 1, at}}},
				{"in standby: uptime and CPU time 4 s", h.s.Standby, time.Minute, []sample{{StateStandby, 4000, 4000, 0, 1, at}}},
				{"2.5 s after a wake: uptime 6.5 s", h.s.Restart, 2500 * time.Millisecond,
					[]sample{{StateRunning, 6500, cpu(6500, 2500), 0, 2, "2026-12-01T10:01:04Z"}}},
				{"draining: still running", h.s.Drain, time.Second, []sample{{StateDraining, 7500, cpu(7500, 3500), 0, 2, "2026-12-01T10:01:04Z"}}},
			})
		})
	}
}

// call sends a control request, which must be answered want, and decodes
// the JSON answer into out, unless nil.
func (c *harness) call(t *testing.T, method, path, body string, want int, out any) {
	t.Helper()
	code, _, b := do(t, c.ctl.Client(), method, c.ctl.URL+path, body, nil)
	if code != want {
		t.Errorf("%s %s = %d %s, want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
}

func TestControlInstances(t *testing.T) {
	c := newHarness(t, Config{})
	var in Instance
	c.call(t, "POST", "/v1/instances",
		`{"namespace":"default","pod":"web-0","container":"app","node":"kraftlet-a","cpu":"500m","memory":"64Mi"}`, http.StatusCreated, &in)
	if in.CPUCores != 0.5 || in.RSSBytes != 64<<20 || in.State != StateRunning || in.Node != "kraftlet-a" {
		t.Errorf("created %+v", in)
	}
	c.call(t, "POST", "/v1/instances", `{"namespace":"default","pod":"web-0","container":"sidecar","cpu":0.1}`, http.StatusCreated, nil)
	c.clk.Step(10 * time.Second)

	// answer is an instance's state or how many instances a call matched.
	type answer struct {
		Instance
		Matched int `json:"matched"`
	}
	for _, step := range []struct {
		method, path, body string
		ok                 func(a answer) bool
	}{
		{"GET", "/v1/instances/" + in.UUID, "", func(a answer) bool { return a.CPUTimeMS == 5000 }},
		{"PUT", "/v1/namespaces/default/pods/web-0/usage", `{"cpu":2}`, func(a answer) bool { return a.Matched == 2 }},
		{"PUT", "/v1/instances/" + in.Name + "/usage", `{"memory":"1Gi"}`, func(a answer) bool { return a.RSSBytes == 1<<30 && a.CPUCores == 2 }},
		{"POST", "/v1/namespaces/default/pods/web-0/standby?container=app", "", func(a answer) bool { return a.Matched == 1 }},
		{"POST", "/v1/instances/" + in.UUID + "/restart", "", func(a answer) bool { return a.StartCount == 2 && a.State == StateRunning }},
		{"POST", "/v1/instances/" + in.UUID + "/drain", "", func(a answer) bool { return a.State == StateDraining }},
		{"POST", "/v1/instances/" + in.UUID + "/stop", "", func(a answer) bool { return a.State == StateStopped }},
	} {
		var a answer
		if c.call(t, step.method, step.path, step.body, http.StatusOK, &a); !step.ok(a) {
			t.Errorf("%s %s = %+v", step.method, step.path, a)
		}
	}
	var all []Instance
	if c.call(t, "GET", "/v1/instances", "", http.StatusOK, &all); len(all) != 2 {
		t.Errorf("listed %d instances, want 2", len(all))
	}
	var deleted answer
	if c.call(t, "DELETE", "/v1/namespaces/default/pods/web-0", "", http.StatusOK, &deleted); deleted.Matched != 2 {
		t.Errorf("delete pod = %+v, want 2 matched", deleted)
	}
	if c.call(t, "GET", "/v1/instances", "", http.StatusOK, &all); len(all) != 0 {
		t.Errorf("listed %d instances after deleting the pod, want 0", len(all))
	}
}

func TestControlErrors(t *testing.T) {
	c := newHarness(t, Config{})
	c.call(t, "POST", "/v1/instances", `{"namespace":"ns","pod":"p","container":"c","uuid":"u1"}`, http.StatusCreated, nil)
	tests := []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/instances", `{"namespace":"ns"`, 400},
		{"POST", "/v1/instances", `{"namespace":"ns","pod":"p","container":"c","colour":"red"}`, 400},
		{"POST", "/v1/instances", `{"namespace":"ns","pod":"p"}`, 400},
		{"POST", "/v1/instances", `{"namespace":"ns","pod":"p","container":"c","cpu":"lots"}`, 400},
		{"GET", "/v1/instances/nope", "", 404},
		{"DELETE", "/v1/instances/nope", "", 404},
		{"POST", "/v1/instances/nope/restart", "", 404},
		{"PUT", "/v1/instances/nope/usage", `{"cpu":1}`, 404},
		{"PUT", "/v1/instances/u1/usage", `{"memory":"-1"}`, 400},
		{"PUT", "/v1/instances/u1/usage", `{"cpu":"-1"}`, 400},
		{"PUT", "/v1/namespaces/ns/pods/nope/usage", `{"cpu":1}`, 404},
		{"POST", "/v1/namespaces/ns/pods/nope/restart", "", 404},
		{"PUT", "/v1/fault", `{"kind":"Explode"}`, 400},
		{"PUT", "/v1/fault", `{"kind":"Slow","delay":"soon"}`, 400},
		{"GET", "/v1/ca.crt", "", 404},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path+" "+tc.body, func(t *testing.T) {
			var out map[string]string
			if c.call(t, tc.method, tc.path, tc.body, tc.want, &out); out["error"] == "" {
				t.Errorf("answer %v, want an error message", out)
			}
		})
	}
}

func TestControlFaults(t *testing.T) {
	c := newHarness(t, Config{})
	var state []Fault
	c.call(t, "PUT", "/v1/fault", `{"kind":"Slow","delay":"5s"}`, http.StatusOK, &state)
	c.call(t, "PUT", "/v1/fault", `{"kind":"HugeBody","bytes":1024,"path":"/v1/instances/metrics"}`, http.StatusOK, &state)
	want := []Fault{{Kind: fakecore.FaultSlow, Delay: metav1.Duration{Duration: 5 * time.Second}}, {Kind: fakecore.FaultHugeBody, Path: metricsPath, Bytes: 1024}}
	if diff := cmp.Diff(want, state); diff != "" {
		t.Errorf("faults (-want +got):\n%s", diff)
	}
	state = nil
	if c.call(t, "DELETE", "/v1/fault?kind=Slow", "", http.StatusOK, &state); !cmp.Equal(want[1:], state) {
		t.Errorf("after clearing Slow: %+v, want %+v", state, want[1:])
	}
	if c.call(t, "DELETE", "/v1/fault", "", http.StatusOK, &state); state == nil || len(state) != 0 {
		t.Errorf("after clearing all: %#v, want []", state)
	}
	withCA := httptest.NewServer(NewControlHandler(c.s, []byte("PEM")))
	defer withCA.Close()
	if _, _, b := do(t, withCA.Client(), "GET", withCA.URL+"/v1/ca.crt", "", nil); b != "PEM" {
		t.Errorf("ca.crt = %q", b)
	}
}
