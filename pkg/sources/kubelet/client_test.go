package kubelet

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

const testToken = "kubelet-tok-5d1e-very-secret"

// fleetEnv is a fleet of fake kubelets on a fake clock, which only the test
// moves: a Slow fault holds its answer until the request ends.
type fleetEnv struct {
	clk   *testingclock.FakeClock
	fleet *fakekubelet.Fleet
}

func newFleetEnv(t *testing.T) *fleetEnv {
	t.Helper()
	// The fleet's certificates are valid from its clock's now, and the
	// client checks them against the real one.
	clk := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	fleet, err := fakekubelet.NewFleet(fakekubelet.Config{Clock: clk, Tokens: []string{testToken}})
	must(t, err)
	t.Cleanup(func() { must(t, fleet.Close()) })
	return &fleetEnv{clk: clk, fleet: fleet}
}

func (e *fleetEnv) addNode(t *testing.T, name string, pods ...string) *fakekubelet.Node {
	t.Helper()
	n, err := e.fleet.AddNode(name, 0)
	must(t, err)
	for _, p := range pods {
		must(t, e.fleet.SetPod(name, fakekubelet.Pod{Namespace: "ns", Name: p}))
	}
	return n
}

// client returns a client that trusts the fleet's CA and presents the
// fleet's token, as the source builds it from --kubelet-* flags; mod
// adjusts its config.
func (e *fleetEnv) client(t *testing.T, mod func(*ClientConfig)) *Client {
	t.Helper()
	cfg := ClientConfig{
		REST: &rest.Config{BearerToken: testToken, TLSClientConfig: rest.TLSClientConfig{CAData: e.fleet.CACertPEM()}}, MaxResponseBytes: 10 << 20,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	must(t, err)
	t.Cleanup(c.http.CloseIdleConnections)
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestClientFailures gives a kubelet each fault that fails a scrape and
// checks the reason the failure is counted under, and that the error names
// the node and never the token.
func TestClientFailures(t *testing.T) {
	// The request timeout is the scraper's per-target deadline on the
	// context: tiny where the fault never answers, else a guard against a
	// hang, which a loaded machine never reaches.
	const (
		timeout = 50 * time.Millisecond
		guard   = 30 * time.Second
	)
	e := newFleetEnv(t)
	node := e.addNode(t, "node-a", "web-0")
	tests := []struct {
		name                string
		fault               fakekubelet.Fault
		maxBytes            int64
		timeout             time.Duration
		token               string
		wantReason, wantErr string
	}{
		// The refusal's body is quoted: the fake answers 401 "Unauthorized" as
		// the kubelet does (test/fakekubelet/node.go); the real kubelet's 403
		// is TestRefusal's and TestRealNode's.
		{name: "refused token", token: "not-accepted", wantReason: sources.ReasonHTTPStatus, wantErr: `returned 401 Unauthorized: "Unauthorized"`},
		{name: "dead", fault: fakekubelet.Fault{Kind: fakekubelet.FaultDead}, wantReason: sources.ReasonConnection, wantErr: "connection refused"},
		{name: "500", fault: fakekubelet.Fault{Kind: fakecore.FaultStatus500}, wantReason: sources.ReasonHTTPStatus, wantErr: "/stats/summary returned 500 Internal Server Error"},
		{name: "untrusted certificate", fault: fakekubelet.Fault{Kind: fakecore.FaultUntrustedCertificate}, wantReason: sources.ReasonTLS, wantErr: "unknown authority"},
		{name: "wrong-name certificate", fault: fakekubelet.Fault{Kind: fakecore.FaultWrongNameCertificate}, wantReason: sources.ReasonTLS, wantErr: "certificate is valid for"},
		{name: "slow past the timeout", fault: fakecore.Slow(time.Hour), timeout: timeout, wantReason: sources.ReasonTimeout, wantErr: "deadline exceeded"},
		{name: "handshake stall", fault: fakekubelet.Fault{Kind: fakecore.FaultHandshakeStall}, timeout: timeout, wantReason: sources.ReasonTimeout, wantErr: "deadline exceeded"},
		{name: "stall", fault: fakekubelet.Fault{Kind: fakecore.FaultStall}, timeout: timeout, wantReason: sources.ReasonTimeout, wantErr: "deadline exceeded"},
		{name: "reset connection", fault: fakekubelet.Fault{Kind: fakecore.FaultResetConnection}, wantReason: sources.ReasonConnection, wantErr: "/stats/summary"},
		{name: "huge body", fault: fakecore.HugeBody(1 << 20), maxBytes: 64 << 10, wantReason: sources.ReasonTooLarge, wantErr: "response larger than 65536 bytes"},
		{name: "truncated", fault: fakekubelet.Fault{Kind: fakecore.FaultTruncated}, wantReason: sources.ReasonDecode, wantErr: "decode summary"},
		{name: "garbage", fault: fakekubelet.Fault{Kind: fakecore.FaultGarbage}, wantReason: sources.ReasonDecode, wantErr: "decode summary"},
	}
	// The table's words are the Summary's; the resource endpoint's path and
	// decode errors differ.
	words := map[Endpoint]*strings.Replacer{
		EndpointSummary:  strings.NewReplacer(),
		EndpointResource: strings.NewReplacer("/stats/summary", "/metrics/resource", "decode summary", "decode resource metrics"),
	}
	for _, ep := range Endpoints {
		for _, tc := range tests {
			t.Run(string(ep)+"/"+tc.name, func(t *testing.T) {
				if tc.fault.Kind != "" {
					must(t, node.SetFault(tc.fault))
					t.Cleanup(func() { must(t, node.ClearFault("")) })
				}
				c := e.client(t, func(cfg *ClientConfig) {
					cfg.Endpoint = ep
					cfg.MaxResponseBytes = cmp.Or(tc.maxBytes, cfg.MaxResponseBytes)
					cfg.REST.BearerToken = cmp.Or(tc.token, cfg.REST.BearerToken)
				})
				ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(tc.timeout, guard))
				defer cancel()
				batch, err := c.Scrape(ctx, node.Name(), node.Address(), "")
				if batch != nil || err == nil {
					t.Fatalf("Scrape = %+v, %v; want an error", batch, err)
				}
				if got := sources.Reason(err); got != tc.wantReason {
					t.Errorf("reason = %q, want %q (error: %v)", got, tc.wantReason, err)
				}
				want := words[ep].Replace(tc.wantErr)
				if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, `node "node-a"`) || strings.Contains(msg, testToken) {
					t.Errorf("error %q: want one that contains %q, names the node and not the token", msg, want)
				}
			})
		}
	}

	// Every fault cleared, the same node answers on both endpoints.
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	for _, ep := range Endpoints {
		if _, err := e.client(t, func(cfg *ClientConfig) { cfg.Endpoint = ep }).Scrape(ctx, node.Name(), node.Address(), ""); err != nil {
			t.Errorf("%s after the faults: %v", ep, err)
		}
	}
}

// A kubelet never redirects /stats/summary; one that does must not get the
// token sent to the Location, here a plain-http listener on loopback.
func TestSummaryRedirectNotFollowed(t *testing.T) {
	var leaked, reached atomic.Bool
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Store(true)
		leaked.Store(r.Header.Get("Authorization") != "")
	}))
	defer plain.Close()
	kubelet := httptest.NewTLSServer(http.RedirectHandler(plain.URL+"/stats/summary", http.StatusFound))
	defer kubelet.Close()

	c, err := NewClient(ClientConfig{REST: &rest.Config{BearerToken: testToken, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}})
	must(t, err)
	_, err = c.Scrape(t.Context(), "n1", strings.TrimPrefix(kubelet.URL, "https://"), "")
	if err == nil || !strings.Contains(err.Error(), "302 Found") {
		t.Errorf("Summary error = %v, want the redirect's own status", err)
	}
	if reached.Load() || leaked.Load() {
		t.Errorf("the redirect was followed (token sent: %v)", leaked.Load())
	}
}

// TestSummaryCertificateHints scrapes a loopback kubelet whose serving
// certificate fails verification in each known way, and checks that the
// error keeps its "tls" reason and carries the hint for that way, which the
// store's reason and the NotFound answer repeat.
func TestSummaryCertificateHints(t *testing.T) {
	now := time.Now()
	ca := func(at time.Time) *pki.CA {
		ca, err := pki.NewCA("kubelet-ca", at, time.Hour)
		must(t, err)
		return ca
	}
	// expired's certificates end an hour ago; the client trusts it too.
	trusted, other, expired := ca(now), ca(now), ca(now.Add(-2*time.Hour))
	serving := func(ca *pki.CA, hosts ...string) tls.Certificate {
		c, err := ca.TLSCertificate(now, pki.Leaf{CommonName: "node-0", Hosts: hosts, Server: true})
		must(t, err)
		return c
	}
	tests := []struct {
		name     string
		cert     tls.Certificate
		wantKind string
		wantHint []string
	}{
		{name: "self-signed style certificate without IP SANs", cert: serving(trusted, "node-0"), wantKind: certNoSAN,
			wantHint: []string{"doesn't contain any IP SANs", "serverTLSBootstrap", "--kubelet-preferred-address-types", TroubleshootingDoc}},
		{name: "signed by a CA the server does not trust", cert: serving(other, "127.0.0.1"), wantKind: certUnknownCA,
			wantHint: []string{"unknown authority", "--kubelet-certificate-authority", TroubleshootingDoc}},
		{name: "expired", cert: serving(expired, "127.0.0.1"), wantKind: certInvalid, wantHint: []string{"expired", "serverTLSBootstrap", TroubleshootingDoc}},
		{name: "valid", cert: serving(trusted, "127.0.0.1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(`{"node":{"nodeName":"node-0","startTime":"2026-01-01T00:00:00Z","cpu":{"time":"2026-01-01T00:00:10Z","usageCoreNanoSeconds":1},"memory":{"time":"2026-01-01T00:00:10Z","workingSetBytes":1}},"pods":[]}`))
			}))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{tt.cert}, MinVersion: tls.VersionTLS12}
			srv.StartTLS()
			defer srv.Close()
			c, err := NewClient(ClientConfig{REST: &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: append(trusted.CertPEM(), expired.CertPEM()...)}}})
			must(t, err)
			_, err = c.Scrape(t.Context(), "node-0", strings.TrimPrefix(srv.URL, "https://"), "")
			if (err != nil) != (tt.wantKind != "") {
				t.Fatalf("Summary error = %v, want a certificate error: %v", err, tt.wantKind != "")
			} else if err == nil {
				return
			}
			if reason, kind := sources.Reason(err), certFailure(err); reason != sources.ReasonTLS || kind != tt.wantKind {
				t.Errorf("Reason, certFailure = %q, %q; want %q, %q", reason, kind, sources.ReasonTLS, tt.wantKind)
			}
			for _, w := range tt.wantHint {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if c.hints.first(tt.wantKind) {
				t.Errorf("kind %q not marked as logged after the first failure", tt.wantKind)
			}
		})
	}
}

func TestWithHintPassesOtherErrors(t *testing.T) {
	var h hinter
	for _, err := range []error{context.DeadlineExceeded, &net.OpError{Op: "dial", Err: &net.AddrError{Err: "refused"}}} {
		got := h.withHint("node-0", "127.0.0.1:1", err)
		var hinted *certHintError
		if errors.As(got, &hinted) || got.Error() != err.Error() {
			t.Errorf("withHint(%v) = %v, want the error unchanged", err, got)
		}
	}
	if len(h.logged) != 0 {
		t.Errorf("logged %v for errors that are not certificate failures", h.logged)
	}
}

func TestHinterLogsEachKindOnce(t *testing.T) {
	var h hinter
	got := []bool{h.first(certNoSAN), h.first(certNoSAN), h.first(certUnknownCA), h.first(certNoSAN)}
	if diff := gocmp.Diff([]bool{true, false, true, false}, got); diff != "" {
		t.Errorf("first (-want +got):\n%s", diff)
	}
}

// TestRefusal: a refusal's body is quoted in the error, its first line only,
// cut to maxRefusalBytes, whatever the kubelet (or anything in its place)
// sends.
func TestRefusal(t *testing.T) {
	forbidden := "Forbidden (user=system:serviceaccount:kube-system:group-metrics-server, verb=get, resource=nodes, subresource(s)=[stats])"
	long := strings.Repeat("x", 1000)
	tests := []struct{ name, body, want string }{
		{name: "empty", body: "", want: ""},
		{name: "blank", body: " \n", want: ""},
		{name: "the kubelet's 403", body: forbidden + "\n", want: `: "` + forbidden + `"`},
		{name: "first line only", body: "denied\nsecond line\n", want: `: "denied"`},
		{name: "control characters quoted", body: "a\tb\x1b[31m", want: `: "a\tb\x1b[31m"`},
		{name: "cut to the bound", body: long, want: `: "` + long[:maxRefusalBytes] + `..."`},
		{name: "invalid UTF-8 at the cut dropped", body: strings.Repeat("x", maxRefusalBytes-1) + "é", want: `: "` + long[:maxRefusalBytes-1] + `..."`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := refusal(strings.NewReader(tc.body)); got != tc.want {
				t.Errorf("refusal(%q) = %s, want %s", tc.body, got, tc.want)
			}
		})
	}
}

// TestResourceMetricsPath: a node's podcache.ResourceMetricsPathAnnotation
// is read in place of /metrics/resource, as metrics-server reads it (kwok's
// simulated nodes serve theirs at /metrics/nodes/<name>/metrics/resource),
// and never bends the Summary's path, the request's host or its query.
func TestResourceMetricsPath(t *testing.T) {
	const kwokPath = "/metrics/nodes/kwok-0/metrics/resource"
	var requested []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requested = append(requested, r.URL.Path+"?"+r.URL.RawQuery)
		switch {
		case r.URL.Path != kwokPath || r.URL.RawQuery != "":
			http.NotFound(w, r)
		// kwok's route declares no type it produces, and go-restful then
		// takes only an Accept that lists */* (v3.13.0 route.go,
		// matchesAccept).
		case !slices.ContainsFunc(strings.Split(r.Header.Get("Accept"), ","), func(t string) bool { return strings.HasPrefix(strings.TrimSpace(t), "*/*") }):
			http.Error(w, "406: Not Acceptable", http.StatusNotAcceptable)
		default:
			_, _ = w.Write([]byte(resourceText))
		}
	}))
	defer srv.Close()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
	must(t, err)
	portNum, err := strconv.Atoi(port)
	must(t, err)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	tests := []struct {
		name       string
		endpoint   Endpoint
		annotation string
		wantPath   string // "" for no request
		wantErr    string
	}{
		{name: "kwok's path", endpoint: EndpointResource, annotation: kwokPath, wantPath: kwokPath + "?"},
		{name: "without its leading slash", endpoint: EndpointResource, annotation: strings.TrimPrefix(kwokPath, "/"), wantPath: kwokPath + "?"},
		{name: "none", endpoint: EndpointResource, wantPath: "/metrics/resource?", wantErr: "/metrics/resource returned 404"},
		{name: "another host stays in the path", endpoint: EndpointResource, annotation: "//127.0.0.2:1/metrics/resource", wantPath: "//127.0.0.2:1/metrics/resource?", wantErr: "returned 404"},
		{name: "a query stays in the path", endpoint: EndpointResource, annotation: kwokPath + "?x=1", wantPath: kwokPath + "?x=1?", wantErr: "returned 404"},
		{name: "overlong", endpoint: EndpointResource, annotation: "/" + strings.Repeat("x", maxResourcePathBytes), wantErr: "1025 bytes long, more than 1024"},
		{name: "the Summary ignores it", endpoint: EndpointSummary, annotation: kwokPath, wantPath: "/stats/summary?only_cpu_and_memory=true", wantErr: "/stats/summary returned 404"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			requested = nil
			nodes := podcache.NewNodeIndex()
			nodes.Set(podcache.NewNode(&corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "kwok-0", Annotations: map[string]string{podcache.ResourceMetricsPathAnnotation: tc.annotation}},
				Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}}},
			}))
			c, err := NewClient(ClientConfig{REST: &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}, Endpoint: tc.endpoint})
			must(t, err)
			t.Cleanup(c.http.CloseIdleConnections)
			targets, err := NewSource(SourceConfig{Client: c, Nodes: nodes, Port: portNum, AddressTypes: []corev1.NodeAddressType{corev1.NodeInternalIP}}).Targets()
			must(t, err)
			if len(targets) != 1 {
				t.Fatalf("%d targets, want 1", len(targets))
			}
			batch, err := targets[0].Scrape(t.Context())
			if tc.wantErr == "" {
				must(t, err)
				if len(batch.Nodes) != 1 || batch.Nodes[0].Name != "kwok-0" || len(batch.Pods) != 1 {
					t.Errorf("batch = %+v, want kwok-0 and its pod", batch)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Scrape error = %v, want one containing %q", err, tc.wantErr)
			}
			if want := slices.DeleteFunc([]string{tc.wantPath}, func(p string) bool { return p == "" }); !slices.Equal(requested, want) {
				t.Errorf("requested %q, want %q", requested, want)
			}
			if logged := !c.hints.first("resource-metrics-path"); logged != (tc.endpoint == EndpointSummary) {
				t.Errorf("the annotation's notice logged: %v, want it only where the Summary is read", logged)
			}
		})
	}
}
