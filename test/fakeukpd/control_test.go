package fakeukpd

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

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
