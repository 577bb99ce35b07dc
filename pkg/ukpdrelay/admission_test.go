package ukpdrelay

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// TestAuthorizationAttributes checks what the relay asks: what the kubelet
// asks for its /stats and /metrics, on the relay's node.
func TestAuthorizationAttributes(t *testing.T) {
	e := newEnv(t, ukpdAnswer, nil)
	for _, p := range []string{"/v1/instances?count=100", "/v1/instances/metrics", "/metrics"} {
		if got := e.do(t, http.MethodGet, p, readerToken, ""); got.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", p, got.Code, got.Body)
		}
	}
	attrs := func(subresource, path string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{
			User: &user.DefaultInfo{Name: readerName}, Verb: "get", APIVersion: "v1", Resource: "nodes",
			Subresource: subresource, Name: nodeName, ResourceRequest: true, Path: path,
		}
	}
	checkDiff(t, "attributes asked", []authorizer.AttributesRecord{
		attrs("stats", "/v1/instances"), attrs("stats", "/v1/instances/metrics"), attrs("metrics", "/metrics"),
	}, e.authz.attributes())
}

// TestSelfEndpoints serves /healthz to anyone and /metrics to the reader.
func TestSelfEndpoints(t *testing.T) {
	e := newEnv(t, ukpdAnswer, nil)
	e.do(t, http.MethodGet, "/v1/instances", readerToken, "")

	if got := e.do(t, http.MethodGet, "/healthz", "", ""); got.Code != http.StatusOK || got.Body != "ok" {
		t.Errorf("GET /healthz without credentials: %d %q, want 200 ok", got.Code, got.Body)
	}
	got := e.do(t, http.MethodGet, "/metrics", readerToken, "")
	if got.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", got.Code, got.Body)
	}
	for _, want := range []string{
		`group_metrics_server_ukpd_relay_requests_total{code="200",path="/v1/instances"}`,
		`group_metrics_server_ukpd_relay_upstream_request_duration_seconds_count{path="/v1/instances"}`,
	} {
		if !strings.Contains(got.Body, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if e.authz.attributes()[1].Subresource != "metrics" {
		t.Errorf("/metrics was authorized as %+v, want nodes/metrics", e.authz.attributes()[1])
	}
	if up, _ := e.ukpd.requests(); len(up) != 1 {
		t.Errorf("ukpd received %v, want the one list request", up)
	}
}

// TestTokenRotation sends the token the file holds at each request.
func TestTokenRotation(t *testing.T) {
	e := newEnv(t, ukpdAnswer, nil)
	e.do(t, http.MethodGet, "/v1/instances", readerToken, "")
	writeFile(t, e.tokenFile, "ukpd-token-rotated-and-longer\n")
	e.do(t, http.MethodGet, "/v1/instances", readerToken, "")
	up, _ := e.ukpd.requests()
	var auth []string
	for _, s := range up {
		auth = append(auth, s.Authorization)
	}
	checkDiff(t, "Authorization sent to ukpd", []string{"Bearer " + upstreamToken, "Bearer ukpd-token-rotated-and-longer"}, auth)
}

// TestInFlightBound answers 429 to a request over MaxInFlight, while the
// first waits on ukpd.
func TestInFlightBound(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	e := newEnv(t, func(_ *env, w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		ukpdAnswer(nil, w, r)
	}, func(c *Config) { c.MaxInFlight = 1 })
	type result struct {
		answer
		err error
	}
	first := make(chan result, 1)
	go func() {
		a, err := e.send(t.Context(), http.MethodGet, "/v1/instances", readerToken, "")
		first <- result{a, err}
	}()
	select {
	case <-arrived:
	case a := <-first:
		t.Fatalf("first request answered before it reached ukpd: %d %s %v", a.Code, a.Body, a.err)
	}
	got := e.do(t, http.MethodGet, "/v1/instances/metrics", readerToken, "")
	if got.Code != http.StatusTooManyRequests || got.Header.Get("Retry-After") == "" {
		t.Errorf("second request: %d, Retry-After %q; want 429 with Retry-After", got.Code, got.Header.Get("Retry-After"))
	}
	close(release)
	if a := <-first; a.err != nil || a.Code != http.StatusOK {
		t.Errorf("first request: %d %s %v", a.Code, a.Body, a.err)
	}
	if up, _ := e.ukpd.requests(); len(up) != 1 {
		t.Errorf("ukpd received %v, want the first request only", up)
	}
}

func TestNewRefuses(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{name: "a routable upstream", cfg: func(c *Config) { c.Upstream = "http://10.0.0.5:45232" }, want: "the host must be loopback"},
		{name: "a host name", cfg: func(c *Config) { c.Upstream = "http://ukpd.example:45232" }, want: "the host must be loopback"},
		{name: "credentials in the URL", cfg: func(c *Config) { c.Upstream = "http://u:secret@127.0.0.1:45232" }, want: "credentials in the URL"},
		{name: "another scheme", cfg: func(c *Config) { c.Upstream = "unix:///run/ukpd.sock" }, want: "scheme must be http or https"},
		{name: "no node", cfg: func(c *Config) { c.NodeName = "" }, want: "node name"},
		{name: "a node name that is no name", cfg: func(c *Config) { c.NodeName = "Kraftlet_A" }, want: "node name"},
		{name: "no token file", cfg: func(c *Config) { c.TokenFile = "" }, want: "token file"},
		{name: "no authorizer", cfg: func(c *Config) { c.Authorizer = nil }, want: "authorizer"},
		{name: "an unreadable CA file", cfg: func(c *Config) { c.Upstream = "https://[::1]:45232"; c.UpstreamCAFile = "/nonexistent/ca.crt" }, want: "read CA file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{TokenFile: "/t", NodeName: nodeName, Authenticator: fakeAuthn(), Authorizer: &fakeAuthz{}}
			tc.cfg(&c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error quotes the URL's credentials: %v", err)
			}
		})
	}
	// The default and loopback forms are accepted.
	for _, u := range []string{"", "http://localhost:45232", "https://[::1]:45232/api"} {
		if _, err := New(Config{Upstream: u, TokenFile: "/t", NodeName: nodeName, Authenticator: fakeAuthn(), Authorizer: &fakeAuthz{}}); err != nil {
			t.Errorf("New with upstream %q: %v", u, err)
		}
	}
}
