//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

const securityNamespace = "e2e-security"

// credentials sets one way of (not) authenticating on a REST config.
type credentials struct {
	name string
	set  func(*rest.Config)
	// want is the status every protected path must answer with, through the aggregator and directly; 0 for
	// the cluster admin, answered 200, or 404 where nothing is served.
	want int
}

// TestRequestsRefused sends every metrics.k8s.io and custom.metrics.k8s.io read, and the server's own paths,
// as identities that must get 401 or 403.
func TestRequestsRefused(t *testing.T) {
	ctx := begin(t, 4*time.Minute)
	pid := suite.server.Process.Pid()
	newNamespace(ctx, t, securityNamespace)
	creds := append(refusedCredentials(ctx, t), credentials{name: "admin", set: asAdmin})
	node := suite.fleet.NodeNames[0]

	check := func(t *testing.T, s *env.Server, paths []string) {
		for _, via := range vias(s) {
			paths := paths
			if via.name == "direct" {
				paths = append(slices.Clone(paths), serverOwnPaths...)
			}
			for _, c := range creds {
				t.Run(via.name+"/"+c.name, func(t *testing.T) {
					ep := via.endpoint(t, c.set)
					for _, p := range paths {
						want := []int{c.want}
						switch {
						case c.want == 0 && p == profilingPath:
							want = []int{http.StatusNotFound} // profiling is off
						case c.want == 0:
							want = []int{http.StatusOK, http.StatusNotFound}
						}
						getExpecting(ctx, t, ep.client, ep.base+p, want)
					}
				})
			}
		}
	}

	t.Run("metrics.k8s.io", func(t *testing.T) {
		check(t, suite.server, metricsPaths(securityNamespace, node))
	})
	t.Run("custom.metrics.k8s.io", func(t *testing.T) {
		// The suite's server does not serve custom.metrics.k8s.io; one from manifests/custom-metrics does,
		// until the subtest ends.
		s := deployCustomMetricsServer(ctx, t, "group-metrics-server-security")
		check(t, s, append(customMetricsPaths(securityNamespace), metricsPaths(securityNamespace, node)...))
	})
	checkServerUp(ctx, t, pid)
}

// serverOwnPaths are protected paths only the server's own port has: self-metrics, and profiling, which the
// manifests leave off (the admin gets 404). Discovery and /openapi are open to every authenticated user, as
// on kube-apiserver (system:discovery), so they are not here.
var serverOwnPaths = []string{"/metrics", profilingPath}

const profilingPath = "/debug/pprof/"

func metricsPaths(ns, node string) (out []string) {
	for _, v := range []string{"v1", "v1beta1"} {
		base := "/apis/metrics.k8s.io/" + v
		out = append(out, base+"/nodes", base+"/nodes/"+node, base+"/pods", base+"/namespaces/"+ns+"/pods",
			base+"/namespaces/"+ns+"/pods/no-such-pod")
	}
	return out
}

func customMetricsPaths(ns string) (out []string) {
	for _, v := range []string{"v1beta1", "v1beta2"} {
		base := "/apis/custom.metrics.k8s.io/" + v + "/namespaces/" + ns
		out = append(out, base+"/pods/*/"+provider.MetricCPUUtilization,
			base+"/"+provider.LWSResource.String()+"/no-such-lws/"+provider.MetricCPUUtilization)
	}
	return out
}

// via is a way to reach a server with no credentials: through kube-apiserver's aggregator, or directly at its
// port, verifying its certificate as the aggregator does.
type via struct {
	name string
	base func() *rest.Config
}

func vias(s *env.Server) []via {
	return []via{
		{"aggregator", func() *rest.Config {
			return &rest.Config{
				Host:            suite.cluster.APIServerURL(),
				TLSClientConfig: rest.TLSClientConfig{CAData: suite.cluster.CACertPEM()},
				Timeout:         30 * time.Second,
			}
		}},
		{"direct", func() *rest.Config {
			cfg := s.RESTConfig()
			cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = nil, nil, "", ""
			return cfg
		}},
	}
}

// endpoint reaches the server through v with the config set changes; its client's connections are closed when
// the test ends.
func (v via) endpoint(t *testing.T, set func(*rest.Config)) endpoint {
	t.Helper()
	cfg := v.base()
	set(cfg)
	client, err := rest.HTTPClientFor(cfg)
	must(t, err)
	t.Cleanup(client.CloseIdleConnections)
	return endpoint{name: v.name, base: cfg.Host, client: client}
}

// asAdmin sets the cluster admin's client certificate on cfg.
func asAdmin(cfg *rest.Config) {
	admin := suite.cluster.RESTConfig()
	cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = admin.CertData, admin.KeyData, admin.CertFile, admin.KeyFile
}

// TestHostileRequests sends malformed, unsupported or oversized selectors and names as the cluster admin:
// each answered as listed, never with a 5xx.
func TestHostileRequests(t *testing.T) {
	ctx := begin(t, 3*time.Minute)
	pid := suite.server.Process.Pid()
	const ns = "kube-system"
	long := strings.Repeat("a", 10_000)
	cases := []struct {
		name  string
		path  string // escaped path, appended to the metrics.k8s.io version
		query url.Values
		want  []int
		// http1 sends the request over HTTP/1.1 only: an HTTP/2 client refuses to send headers above the
		// limit the server advertises.
		http1 bool
	}{
		{name: "garbage-label-selector", path: "/namespaces/" + ns + "/pods", query: url.Values{"labelSelector": {"!!!==,(x"}}, want: []int{http.StatusBadRequest}},
		{name: "label-key-too-long", path: "/pods", query: url.Values{"labelSelector": {long + "=v"}}, want: []int{http.StatusBadRequest}},
		// 64 KiB of one valid requirement, repeated: a valid selector.
		{name: "label-selector-64KiB", path: "/pods", query: url.Values{"labelSelector": {strings.Repeat("a=b,", 16<<10) + "a=b"}}, want: []int{http.StatusOK}},
		{name: "label-selector-2MiB", path: "/pods", query: url.Values{"labelSelector": {strings.Repeat("a=b,", 512<<10)}}, want: []int{http.StatusRequestURITooLong, http.StatusRequestHeaderFieldsTooLarge}, http1: true},
		{name: "unsupported-field-selector", path: "/namespaces/" + ns + "/pods", query: url.Values{"fieldSelector": {"spec.nodeName=x"}}, want: []int{http.StatusBadRequest}},
		{name: "field-selector-without-operator", path: "/nodes", query: url.Values{"fieldSelector": {"metadata.name"}}, want: []int{http.StatusBadRequest}},
		{name: "field-selector-unescaped-value", path: "/nodes", query: url.Values{"fieldSelector": {"metadata.name=a=b"}}, want: []int{http.StatusBadRequest}},
		{name: "long-pod-name", path: "/namespaces/" + ns + "/pods/" + long, want: []int{http.StatusNotFound}},
		{name: "long-node-name", path: "/nodes/" + long, want: []int{http.StatusNotFound}},
		{name: "long-namespace", path: "/namespaces/" + long + "/pods", want: []int{http.StatusOK, http.StatusNotFound}},
		{name: "dot-dot-name", path: "/namespaces/" + ns + "/pods/..", want: []int{http.StatusBadRequest, http.StatusNotFound}},
		{name: "escaped-dot-dot-name", path: "/namespaces/" + ns + "/pods/%2e%2e", want: []int{http.StatusBadRequest, http.StatusNotFound}},
		{name: "escaped-traversal", path: "/namespaces/" + ns + "/pods/..%2f..%2f..%2fapi%2fv1%2fsecrets", want: []int{http.StatusBadRequest, http.StatusNotFound}},
		{name: "escaped-slash-name", path: "/nodes/a%2fb", want: []int{http.StatusBadRequest, http.StatusNotFound}},
		{name: "nul-name", path: "/nodes/a%00b", want: []int{http.StatusBadRequest, http.StatusNotFound}},
		{name: "invalid-utf8-name", path: "/namespaces/" + ns + "/pods/%ff%fe", want: []int{http.StatusBadRequest, http.StatusNotFound}},
	}
	seen := map[string][]int{} // per case, the answers: for the log
	for _, via := range vias(suite.server) {
		for _, proto := range []struct{ name, alpn string }{{"h2", "h2"}, {"http1", "http/1.1"}} {
			ep := via.endpoint(t, func(cfg *rest.Config) {
				asAdmin(cfg)
				cfg.NextProtos = []string{proto.alpn}
			})
			// A redirect is an answer too: take it as it comes.
			ep.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			for _, v := range []string{"v1", "v1beta1"} {
				for _, tc := range cases {
					if tc.http1 && proto.alpn != "http/1.1" {
						continue
					}
					t.Run(via.name+"/"+proto.name+"/"+v+"/"+tc.name, func(t *testing.T) {
						u := ep.base + "/apis/metrics.k8s.io/" + v + tc.path
						if len(tc.query) > 0 {
							u += "?" + tc.query.Encode()
						}
						seen[tc.name] = append(seen[tc.name], getExpecting(ctx, t, ep.client, u, tc.want))
					})
				}
			}
		}
	}
	for _, tc := range cases {
		t.Logf("%s: answered %v", tc.name, seen[tc.name])
	}
	checkServerUp(ctx, t, pid)
}

// checkServerUp checks that the suite's server still runs as pid, is ready with its metric storage, and
// answers a list.
func checkServerUp(ctx context.Context, t *testing.T, pid int) {
	t.Helper()
	select {
	case <-suite.server.Process.Done():
		t.Fatalf("the server exited: %v", suite.server.Process.Err())
	default:
	}
	if got := suite.server.Process.Pid(); got != pid {
		t.Errorf("the server's PID changed from %d to %d", pid, got)
	}
	ep := directEndpoint(t, suite.server)
	defer ep.client.CloseIdleConnections()
	code, body, err := env.Get(ctx, ep.client, ep.base+"/readyz?verbose")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "[+]metric-storage-ready ok") {
		t.Errorf("/readyz?verbose: %d %v\n%s", code, err, body)
	}
	getExpecting(ctx, t, ep.client, ep.base+"/apis/metrics.k8s.io/v1beta1/nodes", []int{http.StatusOK})
}

// getExpecting GETs u and returns the status, which must be one of want. A transport error fails the test; so
// does an answer that carries a credential the suite gave a server.
func getExpecting(ctx context.Context, t *testing.T, client *http.Client, u string, want []int) int {
	t.Helper()
	code, body, err := env.Get(ctx, client, u)
	if err != nil {
		t.Fatalf("GET %.150s: %.300s", u, err)
	}
	if hit, at := suiteSecrets.find([]byte(body)); at >= 0 {
		t.Errorf("GET %.150s: the answer holds %s", u, hit)
	}
	if !slices.Contains(want, code) {
		t.Errorf("GET %.150s: %d, want one of %v: %.300s", u, code, want, body)
	}
	return code
}

// refusedCredentials are the identities TestRequestsRefused sends.
func refusedCredentials(ctx context.Context, t *testing.T) []credentials {
	t.Helper()
	saToken := newServiceAccount(ctx, t, securityNamespace, "no-rbac")
	// A client certificate for the cluster admin's name and group, signed by a CA the cluster has never seen.
	now := time.Now()
	ca, err := pki.NewCA("e2e-foreign-ca", now, time.Hour)
	must(t, err)
	certPEM, keyPEM, err := ca.Issue(now, pki.Leaf{CommonName: "kubernetes-admin", Organizations: []string{"system:masters"}, Client: true})
	must(t, err)
	return []credentials{
		{name: "anonymous", set: func(*rest.Config) {}, want: http.StatusForbidden},
		{name: "unknown-token", set: func(c *rest.Config) { c.BearerToken = "e2e-not-a-token-" + rand.Text() }, want: http.StatusUnauthorized},
		{name: "forged-token", set: func(c *rest.Config) { c.BearerToken = forgedToken(t) }, want: http.StatusUnauthorized},
		{name: "no-rbac-serviceaccount", set: func(c *rest.Config) { c.BearerToken = saToken }, want: http.StatusForbidden},
		{name: "foreign-client-cert", set: func(c *rest.Config) { c.CertData, c.KeyData = certPEM, keyPEM }, want: http.StatusUnauthorized},
	}
}

// forgedToken is a well-formed ES256 JWT claiming to be the server's ServiceAccount, signed with a key nobody
// trusts.
func forgedToken(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	enc := base64.RawURLEncoding
	now := time.Now().Unix()
	claims := fmt.Sprintf(`{"iss":%q,"sub":"system:serviceaccount:%s:%s","aud":[%q],"iat":%d,"nbf":%d,"exp":%d}`,
		suite.cluster.APIServerURL(), suite.server.Namespace, suite.server.ServiceAccount, suite.cluster.APIServerURL(), now, now, now+3600)
	signed := enc.EncodeToString([]byte(`{"alg":"ES256","typ":"JWT","kid":"e2e-forged"}`)) + "." + enc.EncodeToString([]byte(claims))
	digest := sha256.Sum256([]byte(signed))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	must(t, err)
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signed + "." + enc.EncodeToString(sig)
}
