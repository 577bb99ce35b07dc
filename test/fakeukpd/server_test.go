package fakeukpd

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
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

// harness serves a Server, and its control API without a CA.
type harness struct {
	clk      *clocktesting.FakeClock
	s        *Server
	srv, ctl *httptest.Server
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	cfg.Clock = clk
	if cfg.Tokens == nil && cfg.TokenFile == "" {
		cfg.Tokens = []string{token}
	}
	h := &harness{clk: clk, s: New(cfg)}
	h.srv, h.ctl = httptest.NewServer(h.s), httptest.NewServer(NewControlHandler(h.s, nil))
	t.Cleanup(h.ctl.Close)
	t.Cleanup(h.srv.Close)
	t.Cleanup(h.s.Close)
	return h
}

// do sends method url with body and the headers that are not empty, and
// returns the answer.
func do(t *testing.T, client *http.Client, method, url, body string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	must(t, err)
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := client.Do(req)
	must(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// send sends method path to the platform API with the Authorization header
// auth and the Accept header accept, each unless empty.
func (h *harness) send(t *testing.T, method, path, accept, auth string) (int, http.Header, string) {
	t.Helper()
	return do(t, h.srv.Client(), method, h.srv.URL+path, "", map[string]string{"Accept": accept, "Authorization": auth})
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

// uuids are the UUIDs of the instances in an envelope.
func uuids(t *testing.T, body string) (out []string) {
	t.Helper()
	for _, e := range decodeEnvelope[struct{ UUID string }](t, body) {
		out = append(out, e.UUID)
	}
	return out
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
	entry := func(uuid, name, state, image string, uptimeMS int64, stoppedAt string, tags ...string) listEntry {
		return listEntry{Status: "success", UUID: uuid, Name: name, CreatedAt: at, State: state,
			Image: "fake.unikraft.io/" + image + ":latest", MemoryMB: 256, VCPUs: 1, StartCount: 1, StartedAt: at,
			StoppedAt: stoppedAt, UptimeMS: uptimeMS, RestartPolicy: "never", Tags: tags}
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
	// The instances of an answer, or nil for 404.
	for path, want := range map[string][]string{
		metricsPath: {"u1", "u2", "u3"}, metricsPath + "?uuid=u3,u1": {"u3", "u1"}, "/v1/instances/two/metrics": {"u2"},
		"/v1/instances/u9/metrics": nil, "/v1/instances/u1": nil, "/v2/instances": nil,
	} {
		t.Run(path, func(t *testing.T) {
			switch code, _, body := h.get(t, path, contentTypeJSON); {
			case code != map[bool]int{true: 200, false: 404}[want != nil]:
				t.Fatalf("GET %s = %d %s; want 200 with %q, or 404 for none", path, code, body, want)
			case want == nil && !strings.Contains(body, `"status":"error"`):
				t.Errorf("error body %q is not the API envelope", body)
			case want != nil:
				if diff := cmp.Diff(want, uuids(t, body)); diff != "" {
					t.Errorf("instances (-want +got):\n%s", diff)
				}
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

func TestListPages(t *testing.T) {
	h := newHarness(t, Config{PageSize: 3})
	var all []string
	for i := range 7 {
		all = append(all, h.add(t, InstanceSpec{Namespace: "ns", Pod: fmt.Sprintf("p-%d", i), Container: "c"}).UUID)
		h.clk.Step(time.Second)
	}
	tests := []struct {
		query string
		want  []string
	}{
		{"", all[:3]}, // the server's page, whatever the account holds
		{"?count=2", all[:2]},
		{"?count=100", all[:3]},
		{"?count=3&from=" + all[2], all[2:5]}, // from is inclusive
		{"?count=3&from=" + all[6], all[6:]},
		{"?count=3&from=2026-12-01T10:00:04Z", all[4:7]},
	}
	for _, tc := range tests {
		code, _, body := h.get(t, listPath+tc.query, contentTypeJSON)
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", tc.query, code, body)
		}
		if diff := cmp.Diff(tc.want, uuids(t, body)); diff != "" {
			t.Errorf("GET %s (-want +got):\n%s", tc.query, diff)
		}
	}
	for _, bad := range []string{"?from=nope", "?count=-1", "?count=x"} {
		if code, _, _ := h.get(t, listPath+bad, contentTypeJSON); code != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400", bad, code)
		}
	}
}

// TestStartPerHost serves the fake of one host on 127.0.1.2, which Linux
// routes to lo without setup, and names its clients by address, with the
// requests that lacked an accepted token. A client that binds no address
// reaches it from 127.0.0.1. Addresses off loopback are refused.
func TestStartPerHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux routes all of 127.0.0.0/8 to lo")
	}
	for opts, wantErr := range map[*Options]string{
		{Listen: "0.0.0.0:0"}: "not a loopback address", {ControlAddress: "[::]:0"}: "not a loopback address",
		{Config: Config{JSONForm: "yaml"}}: `unknown JSON form "yaml"`,
	} {
		r, err := Start(*opts)
		if r != nil {
			_ = r.Close()
		}
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("Start(%+v) = %v, want an error containing %q", *opts, err, wantErr)
		}
	}
	r, err := Start(Options{Config: Config{Tokens: []string{token}}, Listen: "127.0.1.2:0"})
	must(t, err)
	defer func() { _ = r.Close() }()
	if !strings.HasPrefix(r.URL, "http://127.0.1.2:") {
		t.Fatalf("URL %s, want one on 127.0.1.2", r.URL)
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.1.3")}}
	other := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	for _, auth := range []string{"Bearer " + token, "Bearer nope", ""} {
		do(t, other, http.MethodGet, r.URL+metricsPath, "", map[string]string{"Authorization": auth})
	}
	do(t, http.DefaultClient, http.MethodGet, r.URL+listPath, "", map[string]string{"Authorization": "Bearer " + token})
	want := []Client{{IP: "127.0.0.1", Requests: 1}, {IP: "127.0.1.3", Requests: 3, Unauthorized: 2}}
	var got []Client
	must(t, fakecore.Control{Address: r.ControlAddress}.Do(t.Context(), http.MethodGet, "/v1/clients", nil, &got))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("clients on the control API (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, r.Clients()); diff != "" {
		t.Errorf("Clients (-want +got):\n%s", diff)
	}
}
