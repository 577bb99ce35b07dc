package fakeukpd

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type controlHarness struct {
	*harness
	ctl *httptest.Server
}

func newControlHarness(t *testing.T, caPEM []byte) *controlHarness {
	t.Helper()
	h := newHarness(t, Config{})
	ctl := httptest.NewServer(NewControlHandler(h.s, caPEM))
	t.Cleanup(ctl.Close)
	return &controlHarness{harness: h, ctl: ctl}
}

// call sends a control request and decodes the JSON answer into out (when
// not nil), returning the status.
func (c *controlHarness) call(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, c.ctl.URL+path, strings.NewReader(body))
	must(t, err)
	resp, err := c.ctl.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

func TestControlInstances(t *testing.T) {
	c := newControlHarness(t, nil)
	var in Instance
	if code := c.call(t, "POST", "/v1/instances",
		`{"namespace":"default","pod":"web-0","container":"app","node":"kraftlet-a","cpu":"500m","memory":"64Mi"}`, &in); code != http.StatusCreated {
		t.Fatalf("POST /v1/instances = %d", code)
	}
	if in.CPUCores != 0.5 || in.RSSBytes != 64<<20 || in.State != StateRunning || in.Node != "kraftlet-a" {
		t.Errorf("created %+v", in)
	}
	c.call(t, "POST", "/v1/instances", `{"namespace":"default","pod":"web-0","container":"sidecar","cpu":0.1}`, nil)

	c.clk.Step(10 * time.Second)
	var got Instance
	if code := c.call(t, "GET", "/v1/instances/"+in.UUID, "", &got); code != 200 || got.CPUTimeMS != 5000 {
		t.Errorf("GET instance = %d %+v, want 5000 ms of CPU", code, got)
	}

	var matched map[string]int
	if code := c.call(t, "PUT", "/v1/namespaces/default/pods/web-0/usage", `{"cpu":2}`, &matched); code != 200 || matched["matched"] != 2 {
		t.Errorf("pod usage = %d %v, want 2 matched", code, matched)
	}
	if code := c.call(t, "PUT", "/v1/instances/"+in.Name+"/usage", `{"memory":"1Gi"}`, &got); code != 200 || got.RSSBytes != 1<<30 || got.CPUCores != 2 {
		t.Errorf("instance usage = %d %+v", code, got)
	}
	if code := c.call(t, "POST", "/v1/namespaces/default/pods/web-0/standby?container=app", "", &matched); code != 200 || matched["matched"] != 1 {
		t.Errorf("standby = %d %v", code, matched)
	}
	if code := c.call(t, "POST", "/v1/instances/"+in.UUID+"/restart", "", &got); code != 200 || got.StartCount != 2 || got.State != StateRunning {
		t.Errorf("restart = %d %+v", code, got)
	}
	if code := c.call(t, "POST", "/v1/instances/"+in.UUID+"/drain", "", &got); code != 200 || got.State != StateDraining {
		t.Errorf("drain = %d %+v", code, got)
	}
	if code := c.call(t, "POST", "/v1/instances/"+in.UUID+"/stop", "", &got); code != 200 || got.State != StateStopped {
		t.Errorf("stop = %d %+v", code, got)
	}
	var all []Instance
	c.call(t, "GET", "/v1/instances", "", &all)
	if len(all) != 2 {
		t.Errorf("listed %d instances, want 2", len(all))
	}
	if code := c.call(t, "DELETE", "/v1/namespaces/default/pods/web-0", "", &matched); code != 200 || matched["matched"] != 2 {
		t.Errorf("delete pod = %d %v", code, matched)
	}
	c.call(t, "GET", "/v1/instances", "", &all)
	if len(all) != 0 {
		t.Errorf("listed %d instances after deleting the pod, want 0", len(all))
	}
}

func TestControlErrors(t *testing.T) {
	c := newControlHarness(t, nil)
	c.call(t, "POST", "/v1/instances", `{"namespace":"ns","pod":"p","container":"c","uuid":"u1"}`, nil)
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
			if code := c.call(t, tc.method, tc.path, tc.body, &out); code != tc.want || out["error"] == "" {
				t.Errorf("= %d %v, want %d with an error message", code, out, tc.want)
			}
		})
	}
}

func TestControlFaults(t *testing.T) {
	c := newControlHarness(t, []byte("PEM"))
	var state []Fault
	if code := c.call(t, "PUT", "/v1/fault", `{"kind":"Slow","delay":"5s"}`, &state); code != 200 {
		t.Fatalf("PUT fault = %d", code)
	}
	c.call(t, "PUT", "/v1/fault", `{"kind":"HugeBody","bytes":1024,"path":"/v1/instances/metrics"}`, &state)
	want := []Fault{{Kind: fakecore.FaultSlow, Delay: metav1.Duration{Duration: 5 * time.Second}}, {Kind: fakecore.FaultHugeBody, Path: metricsPath, Bytes: 1024}}
	if diff := cmp.Diff(want, state); diff != "" {
		t.Errorf("faults (-want +got):\n%s", diff)
	}
	state = nil
	c.call(t, "DELETE", "/v1/fault?kind=Slow", "", &state)
	if diff := cmp.Diff(want[1:], state); diff != "" {
		t.Errorf("after clearing Slow (-want +got):\n%s", diff)
	}
	state = nil
	c.call(t, "DELETE", "/v1/fault", "", &state)
	if state == nil || len(state) != 0 {
		t.Errorf("after clearing all: %#v, want []", state)
	}

	resp, err := c.ctl.Client().Get(c.ctl.URL + "/v1/ca.crt")
	must(t, err)
	defer func() { _ = resp.Body.Close() }()
	if b, _ := io.ReadAll(resp.Body); string(b) != "PEM" {
		t.Errorf("ca.crt = %q", b)
	}
}
