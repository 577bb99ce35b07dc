package fakeukpd

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

const token = "fake-token"

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type harness struct {
	clk *clocktesting.FakeClock
	s   *Server
	srv *httptest.Server
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	cfg.Clock = clk
	if cfg.Tokens == nil && cfg.TokenFile == "" {
		cfg.Tokens = []string{token}
	}
	s := New(cfg)
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		srv.Close()
	})
	return &harness{clk: clk, s: s, srv: srv}
}

// send sends method path with the Authorization header auth and the Accept
// header accept, each unless empty, and returns the answer.
func (h *harness) send(t *testing.T, method, path, accept, auth string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, nil)
	must(t, err)
	for k, v := range map[string]string{"Accept": accept, "Authorization": auth} {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := h.srv.Client().Do(req)
	must(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// get fetches path with the token, returning status, content type and body.
func (h *harness) get(t *testing.T, path, accept string) (int, string, string) {
	t.Helper()
	code, header, body := h.send(t, http.MethodGet, path, accept, "Bearer "+token)
	return code, header.Get("Content-Type"), body
}

func (h *harness) add(t *testing.T, spec InstanceSpec) Instance {
	t.Helper()
	in, err := h.s.AddInstance(spec)
	must(t, err)
	return in
}

func decodeEnvelope[T any](t *testing.T, body string) []T {
	t.Helper()
	var env struct {
		Status   string
		Data     struct{ Instances []T }
		OpTimeUS int64 `json:"op_time_us"`
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	if env.Status != "success" || env.OpTimeUS <= 0 {
		t.Errorf("envelope status %q, op_time_us %d", env.Status, env.OpTimeUS)
	}
	return env.Data.Instances
}

// getMetrics fetches the JSON metrics of every instance.
func getMetrics[T any](t *testing.T, h *harness) []T {
	t.Helper()
	code, ct, body := h.get(t, metricsPath, contentTypeJSON)
	if code != http.StatusOK || ct != contentTypeJSON {
		t.Fatalf("GET %s = %d %q", metricsPath, code, ct)
	}
	return decodeEnvelope[T](t, body)
}

func TestList(t *testing.T) {
	h := newHarness(t, Config{})
	web := h.add(t, InstanceSpec{Namespace: "default", Pod: "web-0", Container: "app", Node: "kraftlet-a", CPUCores: 1})
	h.add(t, InstanceSpec{Namespace: "default", Pod: "batch-0", Container: "job", State: StateStopped, UUID: "u-batch", Name: "batch"})
	h.add(t, InstanceSpec{Tags: []string{"production"}, Name: "untagged"})
	h.clk.Step(90 * time.Second)

	code, ct, body := h.get(t, listPath, contentTypeJSON)
	if code != http.StatusOK || ct != contentTypeJSON {
		t.Fatalf("GET %s = %d %q", listPath, code, ct)
	}
	// Oldest first, in creation order.
	const at = "2026-12-01T10:00:00Z"
	entry := func(uuid, name, state, image string, uptimeMS int64, stoppedAt string, tags ...string) listEntry {
		return listEntry{
			Status: "success", UUID: uuid, Name: name, CreatedAt: at, State: state, Image: "fake.unikraft.io/" + image + ":latest",
			MemoryMB: 256, VCPUs: 1, StartCount: 1, StartedAt: at, StoppedAt: stoppedAt, UptimeMS: uptimeMS, RestartPolicy: "never", Tags: tags,
		}
	}
	want := []listEntry{
		entry(web.UUID, "web-0-app-1", "running", "app", 90000, "",
			"k8s.io:namespace=default", "k8s.io:pod=web-0", "k8s.io:container=app", "kraftlet:node=kraftlet-a"),
		entry("u-batch", "batch", "stopped", "job", 0, at, "k8s.io:namespace=default", "k8s.io:pod=batch-0", "k8s.io:container=job"),
		entry("00000000-0000-4000-8000-000000000003", "untagged", "running", "app", 90000, "", "production"),
	}
	if diff := cmp.Diff(want, decodeEnvelope[listEntry](t, body)); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	// The list is JSON whatever is asked.
	if _, ct, _ := h.get(t, listPath, "text/plain"); ct != contentTypeJSON {
		t.Errorf("list asked as text answered %q", ct)
	}
}

func TestMetricsLifecycle(t *testing.T) {
	h := newHarness(t, Config{})
	in := h.add(t, InstanceSpec{Namespace: "ns", Pod: "p", Container: "c", CPUCores: 0.5, RSSBytes: 1 << 20})
	type sample struct {
		State                string
		CPUTimeMS            int64
		RSSBytes, StartCount uint64
		StartedAt            string
		Instances            int
	}
	check := func(step string, want sample) {
		t.Helper()
		var got sample
		for _, e := range getMetrics[metricsEntry](t, h) {
			got = sample{e.State, e.CPUTimeMS, e.RSSBytes, e.StartCount, e.StartedAt, got.Instances + 1}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step, diff)
		}
	}
	h.clk.Step(10 * time.Second)
	check("running", sample{"running", 5000, 1 << 20, 1, "2026-12-01T10:00:00Z", 1})

	must(t, h.s.SetCPU(in.UUID, 2))
	must(t, h.s.SetRSS(in.Name, 2<<20))
	h.clk.Step(1500 * time.Millisecond)
	check("new rate", sample{"running", 8000, 2 << 20, 1, "2026-12-01T10:00:00Z", 1})

	must(t, h.s.Standby(in.UUID))
	h.clk.Step(time.Minute)
	check("standby", sample{"standby", 8000, 0, 1, "2026-12-01T10:00:00Z", 1})

	must(t, h.s.Restart(in.UUID))
	h.clk.Step(2 * time.Second)
	check("woken", sample{"running", 4000, 2 << 20, 2, "2026-12-01T10:01:11Z", 1})

	must(t, h.s.Stop(in.UUID))
	check("stopped instance left out of the metrics", sample{})
	must(t, h.s.Remove(in.UUID))
	if _, _, body := h.get(t, listPath, ""); len(decodeEnvelope[listEntry](t, body)) != 0 {
		t.Errorf("removed instance still listed: %s", body)
	}
	if err := h.s.Restart(in.UUID); !errors.Is(err, fakecore.ErrNotFound) {
		t.Errorf("Restart of a removed instance: %v, want ErrNotFound", err)
	}
}

func TestMetricsText(t *testing.T) {
	h := newHarness(t, Config{})
	h.add(t, InstanceSpec{UUID: "u1", Namespace: "ns", Pod: "p", Container: "c", CPUCores: 0.25, RSSBytes: 4096})
	h.add(t, InstanceSpec{UUID: "u2", Namespace: "ns", Pod: "q", Container: "c", State: StateStandby})
	h.clk.Step(2*time.Second + 500*time.Millisecond)
	for _, accept := range []string{"", "text/plain", "*/*", "application/openmetrics-text; version=1.0.0"} {
		code, ct, body := h.get(t, metricsPath, accept)
		if code != http.StatusOK || ct != contentTypeText {
			t.Fatalf("Accept %q: %d %q", accept, code, ct)
		}
		for _, line := range []string{
			"# HELP instance_cpu_time_s Consumed CPU time in seconds\n# TYPE instance_cpu_time_s counter\n",
			`instance_cpu_time_s{instance_uuid="u1"} 0.625000` + "\n",
			`instance_rss_bytes{instance_uuid="u1"} 4096` + "\n",
			`instance_state{instance_uuid="u1"} 2` + "\n",
			`instance_state{instance_uuid="u2"} 5` + "\n",
			`instance_start_count{instance_uuid="u1"} 1` + "\n",
			`instance_started_at{instance_uuid="u1"} 1796119200` + "\n",
			`instance_rss_bytes{instance_uuid="u2"} 0` + "\n",
		} {
			if !strings.Contains(body, line) {
				t.Errorf("Accept %q: body lacks %q:\n%s", accept, line, body)
			}
		}
	}
	// JSON among other types still selects JSON.
	if _, ct, _ := h.get(t, metricsPath, "text/html, application/json;q=0.9"); ct != contentTypeJSON {
		t.Errorf("mixed Accept answered %q", ct)
	}
}

func TestMetricsSelection(t *testing.T) {
	h := newHarness(t, Config{})
	for i, name := range []string{"one", "two", "three"} {
		h.add(t, InstanceSpec{UUID: "u" + strconv.Itoa(i+1), Name: name, Namespace: "ns", Pod: name, Container: "c"})
	}
	tests := []struct {
		path     string
		wantCode int
		want     []string
	}{
		{path: metricsPath, wantCode: 200, want: []string{"u1", "u2", "u3"}},
		{path: metricsPath + "?uuid=u3,u1", wantCode: 200, want: []string{"u3", "u1"}},
		{path: "/v1/instances/two/metrics", wantCode: 200, want: []string{"u2"}},
		{path: "/v1/instances/u9/metrics", wantCode: 404},
		{path: "/v1/instances/u1", wantCode: 404},
		{path: "/v2/instances", wantCode: 404},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			code, _, body := h.get(t, tc.path, contentTypeJSON)
			if code != tc.wantCode {
				t.Fatalf("GET %s = %d, want %d: %s", tc.path, code, tc.wantCode, body)
			}
			if code != http.StatusOK {
				if !strings.Contains(body, `"status":"error"`) {
					t.Errorf("error body %q is not the API envelope", body)
				}
				return
			}
			var got []string
			for _, e := range decodeEnvelope[metricsEntry](t, body) {
				got = append(got, e.UUID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("instances (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	must(t, os.WriteFile(file, []byte("# accepted\nfrom-file\n\n"), 0o600))
	h := newHarness(t, Config{Tokens: []string{token}, TokenFile: file})
	tests := []struct {
		name, header string
		want         int
	}{
		{name: "configured token", header: "Bearer " + token, want: 200},
		{name: "file token", header: "Bearer from-file", want: 200},
		{name: "scheme in any case", header: "bearer " + token, want: 200},
		{name: "no header", want: 401},
		{name: "wrong token", header: "Bearer nope", want: 401},
		{name: "basic", header: "Basic " + token, want: 401},
		{name: "empty bearer", header: "Bearer ", want: 401},
		{name: "comment is not a token", header: "Bearer # accepted", want: 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, header, _ := h.send(t, http.MethodGet, metricsPath, "", tc.header)
			if code != tc.want {
				t.Errorf("status = %d, want %d", code, tc.want)
			}
			if tc.want == 401 && header.Get("WWW-Authenticate") != "Bearer" {
				t.Errorf("401 without WWW-Authenticate: Bearer")
			}
		})
	}

	// The file is read again when it changes.
	must(t, os.WriteFile(file, []byte("rotated-token-in-file\n"), 0o600))
	h.s.SetTokens("replaced")
	for tok, want := range map[string]int{"rotated-token-in-file": 200, "from-file": 401, token: 401, "replaced": 200} {
		if code, _, _ := h.send(t, http.MethodGet, metricsPath, "", "Bearer "+tok); code != want {
			t.Errorf("token %q after rotation: %d, want %d", tok, code, want)
		}
	}
}

func TestMethodNotAllowed(t *testing.T) {
	h := newHarness(t, Config{})
	if code, _, _ := h.send(t, http.MethodPost, metricsPath, "", "Bearer "+token); code != http.StatusMethodNotAllowed {
		t.Errorf("POST = %d, want 405", code)
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
