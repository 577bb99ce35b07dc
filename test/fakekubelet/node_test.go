package fakekubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

func TestAuthentication(t *testing.T) {
	clientCA, err := pki.NewCA("client-ca", t0, fakecore.CAValidity)
	must(t, err)
	stranger, err := pki.NewCA("stranger-ca", t0, fakecore.CAValidity)
	must(t, err)
	f, _ := newTestFleet(t, Config{
		Tokens:      []string{testToken, "second-token"},
		ClientCAPEM: clientCA.CertPEM(),
		TokenAuthenticator: authenticator.TokenFunc(func(_ context.Context, token string) (*authenticator.Response, bool, error) {
			return &authenticator.Response{}, token == "reviewed-token", nil
		}),
	})
	n := addNode(t, f, "node-a")
	keyPair := func(certPEM, keyPEM []byte, err error) []tls.Certificate {
		must(t, err)
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		must(t, err)
		return []tls.Certificate{c}
	}
	fleetCert := keyPair(f.IssueClientCertificate("scraper", "system:monitoring"))
	caCert := keyPair(clientCA.Issue(t0, pki.Leaf{CommonName: "scraper", Client: true}))
	strangerCert := keyPair(stranger.Issue(t0, pki.Leaf{CommonName: "intruder", Client: true}))

	tests := []struct {
		name         string
		certs        []tls.Certificate
		header, path string
		want         int
	}{
		{name: "no credentials", path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "no credentials on metrics", path: "/metrics/resource", want: http.StatusUnauthorized},
		{name: "wrong token", header: "Bearer nope", path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "empty bearer", header: "Bearer ", path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "basic scheme", header: "Basic " + testToken, path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "token", header: bearerAuth, path: "/stats/summary", want: http.StatusOK},
		{name: "second token on metrics", header: "Bearer second-token", path: "/metrics/resource", want: http.StatusOK},
		{name: "lower-case scheme", header: "bearer " + testToken, path: "/stats/summary", want: http.StatusOK},
		{name: "token accepted by authenticator", header: "Bearer reviewed-token", path: "/stats/summary", want: http.StatusOK},
		{name: "client cert from fleet CA", certs: fleetCert, path: "/stats/summary", want: http.StatusOK},
		{name: "client cert from configured CA", certs: caCert, path: "/metrics/resource", want: http.StatusOK},
		{name: "client cert from unknown CA", certs: strangerCert, path: "/stats/summary", want: http.StatusUnauthorized},
		{name: "unknown CA cert with good token", certs: strangerCert, header: bearerAuth, path: "/stats/summary", want: http.StatusOK},
		{name: "unknown path", header: bearerAuth, path: "/pods", want: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, err := get(t, newClient(t, f, tt.certs...), n, tt.path, tt.header)
			must(t, err)
			checkDiff(t, "status", tt.want, code)
		})
	}
}

func TestServingCertificate(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	for _, serverName := range []string{"127.0.0.1", "localhost", "node-a", "node-b"} {
		t.Run(serverName, func(t *testing.T) {
			conn, err := tls.Dial("tcp", n.Address(), &tls.Config{RootCAs: certPool(f), ServerName: serverName, MinVersion: tls.VersionTLS12})
			if want := serverName != "node-b"; want != (err == nil) {
				t.Fatalf("TLS with server name %q: %v; want it to verify: %v", serverName, err, want)
			}
			if err == nil {
				conn.Close()
			}
		})
	}
}

// lingering returns the stacks of goroutines that serve or run fleet code,
// other than the calling test's own.
func lingering() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "fakekubelet.Test") && (strings.Contains(g, "fakekubelet.") || strings.Contains(g, "net/http.(*Server).Serve")) {
			out = append(out, g)
		}
	}
	return out
}

func TestCloseStopsEverything(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	nodes := []*Node{addNode(t, f, "a"), addNode(t, f, "b"), addNode(t, f, "c"), addNode(t, f, "d")}
	c := newClient(t, f)
	mustGet(t, c, nodes[0], summaryPath)
	must(t, nodes[1].SetFault(Fault{Kind: fakecore.FaultStall}))
	must(t, nodes[2].SetFault(fakecore.Slow(time.Hour)))
	must(t, nodes[3].SetFault(Fault{Kind: FaultDead}))
	// Requests in flight on the stalled and the slow node.
	ended := make(chan error, 2)
	for _, n := range nodes[1:3] {
		go func() { _, _, err := get(t, c, n, summaryPath, bearerAuth); ended <- err }()
	}
	// Close must return with both requests in flight or not yet arrived;
	// either way nothing of the fleet may be left running.
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		<-ended
	}
	var left []string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, requestTimeout, true, func(context.Context) (bool, error) {
		left = lingering()
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
	}
	if _, err := f.AddNode("late", 0); err == nil {
		t.Error("AddNode after Close succeeded")
	}
}

// The faults both fakes have are tested in fakecore's TestFaults.

// podView is what the pod-fault tests read of one pod in a Summary.
type podView struct {
	Pod                 string
	Time                time.Time
	Counter, WorkingSet uint64
}

func summaryView(t *testing.T, n *Node) (out []podView) {
	for _, p := range summary(t, n).Pods {
		c := p.Containers[0]
		out = append(out, podView{p.PodRef.Namespace + "/" + p.PodRef.Name, c.CPU.Time.UTC(), *c.CPU.UsageCoreNanoSeconds, *c.Memory.WorkingSetBytes})
	}
	return out
}

// TestPodFaults checks the faults that list pods a node does not have: a
// copy has twice the usage of its pod, and neither the node's own totals
// nor the other node change.
func TestPodFaults(t *testing.T) {
	f, fc := newTestFleet(t, Config{})
	a, b := addNode(t, f, "node-a"), addNode(t, f, "node-b")
	for pod, node := range map[string]string{"a": "node-a", "b": "node-a", "c": "node-b"} {
		must(t, f.SetPod(node, Pod{Namespace: "ns", Name: pod}))
	}
	fc.Step(10 * time.Second)
	pod := func(name string, scale uint64) podView {
		return podView{name, t0.Add(10 * time.Second), scale * 10 * DefaultContainerCPU, scale * DefaultContainerMemory}
	}
	tests := []struct {
		name  string
		fault Fault
		want  []podView
	}{
		{name: "one pod twice", fault: Fault{Kind: FaultDuplicatePods, Pod: "ns/b"}, want: []podView{pod("ns/a", 1), pod("ns/b", 1), pod("ns/b", 2)}},
		{name: "every pod twice", fault: Fault{Kind: FaultDuplicatePods}, want: []podView{pod("ns/a", 1), pod("ns/a", 2), pod("ns/b", 1), pod("ns/b", 2)}},
		{name: "foreign pods", fault: Fault{Kind: FaultForeignPods}, want: []podView{pod("ns/a", 1), pod("ns/b", 1), pod("ns/c", 2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			must(t, a.SetFault(tt.fault))
			checkDiff(t, "node-a", tt.want, summaryView(t, a))
			if got := *a.Summary(true).Node.CPU.UsageCoreNanoSeconds; got != 10*(DefaultNodeBaseCPU+2*DefaultContainerCPU) {
				t.Errorf("node-a counter %d", got)
			}
			checkDiff(t, "node-b", []podView{pod("ns/c", 1)}, summaryView(t, b))
			must(t, a.ClearFault(tt.fault.Kind))
			checkDiff(t, "after clearing", []podView{pod("ns/a", 1), pod("ns/b", 1)}, summaryView(t, a))
		})
	}
}

// TestConnectionFaultWhileDead checks that a node's Dead and transport
// faults compose: it comes back with the transport fault.
func TestConnectionFaultWhileDead(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	must(t, n.SetFault(Fault{Kind: FaultDead}))
	must(t, n.SetFault(Fault{Kind: fakecore.FaultUntrustedCertificate}))
	if _, _, err := get(t, newClient(t, f), n, summaryPath, bearerAuth); err == nil {
		t.Fatal("a Dead node answered")
	}
	must(t, n.ClearFault(FaultDead))
	if code, _, err := get(t, newClient(t, f), n, summaryPath, bearerAuth); !errors.As(err, &x509.UnknownAuthorityError{}) {
		t.Errorf("got %d, %v; want an unknown authority", code, err)
	}
	must(t, n.ClearFault(""))
	mustGet(t, newClient(t, f), n, summaryPath)
}

// t0 is a whole second, so sample instants fall on whole seconds from it.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	testToken  = "test-token"
	bearerAuth = "Bearer " + testToken
	// requestTimeout bounds every request a test makes; it is a guard
	// against hangs, never an assertion about speed.
	requestTimeout = 30 * time.Second
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newTestFleet starts a fleet on a fake clock at t0, closed with the test.
func newTestFleet(t *testing.T, cfg Config) (*Fleet, *testingclock.FakeClock) {
	t.Helper()
	fc := testingclock.NewFakeClock(t0)
	cfg.Clock = fc
	if cfg.Tokens == nil {
		cfg.Tokens = []string{testToken}
	}
	f, err := NewFleet(cfg)
	must(t, err)
	t.Cleanup(func() { must(t, f.Close()) })
	return f, fc
}

func addNode(t *testing.T, f *Fleet, name string) *Node {
	t.Helper()
	n, err := f.AddNode(name, 0)
	must(t, err)
	return n
}

// usages returns the usage of every container of the named nodes (of
// every node, without names) by namespace/pod/container.
func usages(f *Fleet, nodes ...string) map[string]Usage {
	out := map[string]Usage{}
	for _, n := range f.Nodes() {
		if len(nodes) > 0 && !slices.Contains(nodes, n.Name()) {
			continue
		}
		for _, p := range n.State(true).Pods {
			for _, c := range p.Containers {
				out[p.PodRef.Namespace+"/"+p.PodRef.Name+"/"+c.Name] = Usage{CPUNanoCores: *c.CPU.UsageNanoCores, MemoryBytes: *c.Memory.WorkingSetBytes}
			}
		}
	}
	return out
}

// certPool returns a pool holding the fleet CA.
func certPool(f *Fleet) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(f.CACertPEM())
	return p
}

// newClient returns a client that trusts the fleet CA, with certs.
func newClient(t *testing.T, f *Fleet, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: certPool(f), Certificates: certs, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// do sends method url with body and, if not empty, the Authorization
// header auth.
func do(t *testing.T, c *http.Client, method, url, body, auth string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	must(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// get fetches a node path.
func get(t *testing.T, c *http.Client, n *Node, path, auth string) (int, []byte, error) {
	return do(t, c, http.MethodGet, "https://"+n.Address()+path, "", auth)
}

func mustGet(t *testing.T, c *http.Client, n *Node, path string) []byte {
	t.Helper()
	code, body, err := get(t, c, n, path, bearerAuth)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: status %d, body %q, %v", path, code, body, err)
	}
	return body
}

// summary fetches the node's CPU-and-memory Summary.
func summary(t *testing.T, n *Node) stats.Summary {
	t.Helper()
	var s stats.Summary
	must(t, json.Unmarshal(mustGet(t, newClient(t, n.fleet), n, summaryPath+"?only_cpu_and_memory=true"), &s))
	return s
}

// checkDiff reports what differs between want and got.
func checkDiff(t *testing.T, what string, want, got any) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}
