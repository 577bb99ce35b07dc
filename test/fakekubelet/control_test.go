package fakekubelet

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

func TestControlAPI(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	addNode(t, f, "n1")
	addNode(t, f, "n2")
	srv := httptest.NewServer(NewControlHandler(f))
	t.Cleanup(srv.Close)

	call := func(t *testing.T, method, path, body string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		must(t, err)
		resp, err := srv.Client().Do(req)
		must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// usage and faults read what a case changed.
	usage := func(node string) func() any { return func() any { return usages(f, node) } }
	faults := func(nodes ...string) func() any {
		return func() any {
			var out [][]Fault
			for _, name := range nodes {
				n, _ := f.Node(name)
				out = append(out, n.Faults())
			}
			return out
		}
	}

	tests := []struct {
		name, method, path, body string
		wantCode                 int
		wantBody                 string // substring
		got                      func() any
		want                     any
	}{
		{name: "healthz", method: "GET", path: "/healthz", wantCode: 200, wantBody: "ok"},
		{name: "ca", method: "GET", path: "/v1/ca.crt", wantCode: 200, wantBody: "BEGIN CERTIFICATE"},
		{name: "place pod", method: "PUT", path: "/v1/nodes/n1/pods/shop/web-1",
			body: `{"labels":{"app":"web"},"containers":[{"name":"a","memoryLimit":"1Gi"},{"name":"b"}]}`, wantCode: 200, wantBody: `"name": "web-1"`},
		{name: "place second pod", method: "PUT", path: "/v1/nodes/n2/pods/shop/web-2", body: `{"labels":{"app":"web"}}`, wantCode: 200},
		{name: "place pod on unknown node", method: "PUT", path: "/v1/nodes/n9/pods/shop/x", body: `{}`, wantCode: 404},
		{name: "pod usage with quantities", method: "PUT", path: "/v1/namespaces/shop/pods/web-1/usage",
			body: `{"cpu":"500m","memory":"64Mi"}`, wantCode: 200, wantBody: `"matched": 1`,
			got: usage("n1"), want: map[string]Usage{"shop/web-1/a": {250e6, 32 << 20}, "shop/web-1/b": {250e6, 32 << 20}}},
		{name: "container cpu only, as a number of cores", method: "PUT", path: "/v1/namespaces/shop/pods/web-1/usage",
			body: `{"container":"b","cpu":1.5}`, wantCode: 200,
			got: usage("n1"), want: map[string]Usage{"shop/web-1/a": {250e6, 32 << 20}, "shop/web-1/b": {1500e6, 32 << 20}}},
		{name: "selector usage", method: "PUT", path: "/v1/usage",
			body: `{"namespace":"shop","selector":"app=web","memory":"100Mi"}`, wantCode: 200, wantBody: `"matched": 2`,
			got: usage("n2"), want: map[string]Usage{"shop/web-2/main": {DefaultContainerCPU, 100 << 20}}},
		{name: "bad selector", method: "PUT", path: "/v1/usage", body: `{"selector":"a in (","cpu":"1"}`, wantCode: 400},
		{name: "usage without values", method: "PUT", path: "/v1/usage", body: `{"selector":"app=web"}`, wantCode: 400},
		{name: "negative cpu", method: "PUT", path: "/v1/usage", body: `{"cpu":"-1"}`, wantCode: 400},
		{name: "unknown field", method: "PUT", path: "/v1/usage", body: `{"cpus":"1"}`, wantCode: 400},
		{name: "forget usage", method: "DELETE", path: "/v1/usage", wantCode: 200},
		{name: "slow fault", method: "PUT", path: "/v1/nodes/n1/fault", body: `{"kind":"Slow","delay":"2s"}`, wantCode: 200, wantBody: `"delay": "2s"`,
			got: faults("n1"), want: [][]Fault{{fakecore.Slow(2 * time.Second)}}},
		{name: "huge body fault on all nodes", method: "PUT", path: "/v1/nodes/*/fault", body: `{"kind":"HugeBody","bytes":1024}`, wantCode: 200,
			got: faults("n2"), want: [][]Fault{{fakecore.HugeBody(1024)}}},
		{name: "data faults", method: "PUT", path: "/v1/nodes/n2/fault", body: `{"kind":"ClockBackwards","offset":"20s"}`, wantCode: 200, wantBody: `"offset": "20s"`},
		{name: "duplicate one pod", method: "PUT", path: "/v1/nodes/n2/fault", body: `{"kind":"DuplicatePods","pod":"shop/web-2"}`, wantCode: 200,
			got: faults("n2"), want: [][]Fault{{fakecore.ClockBackwards(20 * time.Second), {Kind: FaultDuplicatePods, Pod: "shop/web-2"}, fakecore.HugeBody(1024)}}},
		{name: "bad offset", method: "PUT", path: "/v1/nodes/n1/fault", body: `{"kind":"ClockBackwards","offset":"later"}`, wantCode: 400},
		{name: "bad pod", method: "PUT", path: "/v1/nodes/n1/fault", body: `{"kind":"DuplicatePods","pod":"web-2"}`, wantCode: 400},
		{name: "bad delay", method: "PUT", path: "/v1/nodes/n1/fault", body: `{"kind":"Slow","delay":"soon"}`, wantCode: 400},
		{name: "unknown fault", method: "PUT", path: "/v1/nodes/n1/fault", body: `{"kind":"Melt"}`, wantCode: 400},
		{name: "clear unknown fault", method: "DELETE", path: "/v1/nodes/n1/fault?kind=Melt", wantCode: 400},
		{name: "fault on unknown node", method: "PUT", path: "/v1/nodes/n9/fault", body: `{"kind":"Status500"}`, wantCode: 404},
		{name: "clear one fault", method: "DELETE", path: "/v1/nodes/n1/fault?kind=Slow", wantCode: 200,
			got: faults("n1"), want: [][]Fault{{fakecore.HugeBody(1024)}}},
		{name: "clear all faults everywhere", method: "DELETE", path: "/v1/nodes/*/fault", wantCode: 200,
			got: faults("n1", "n2"), want: [][]Fault{nil, nil}},
		{name: "node counter reset", method: "POST", path: "/v1/nodes/n1/counter-reset", wantCode: 200},
		{name: "pod counter reset", method: "POST", path: "/v1/namespaces/shop/pods/web-2/counter-reset", wantCode: 200},
		{name: "unknown pod counter reset", method: "POST", path: "/v1/namespaces/shop/pods/nope/counter-reset", wantCode: 404},
		{name: "node state", method: "GET", path: "/v1/nodes/n1", wantCode: 200, wantBody: `"uid": "`},
		{name: "remove pod", method: "DELETE", path: "/v1/namespaces/shop/pods/web-2", wantCode: 200,
			got: usage("n2"), want: map[string]Usage{}},
		{name: "remove unknown pod", method: "DELETE", path: "/v1/namespaces/shop/pods/web-2", wantCode: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(t, tt.method, tt.path, tt.body)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Fatalf("%s %s: got %d %s; want %d containing %q", tt.method, tt.path, code, body, tt.wantCode, tt.wantBody)
			}
			if tt.got != nil {
				if diff := cmp.Diff(tt.want, tt.got()); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}

	t.Run("list nodes", func(t *testing.T) {
		_, body := call(t, "GET", "/v1/nodes", "")
		var got []NodeState
		must(t, json.Unmarshal([]byte(body), &got))
		var names []string
		for _, n := range got {
			names = append(names, n.Name)
			if n.Port == 0 || n.Address == "" {
				t.Errorf("node %s without an address: %+v", n.Name, n)
			}
		}
		if diff := cmp.Diff([]string{"n1", "n2"}, names); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}
