package fakekubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"

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
		name   string
		certs  []tls.Certificate
		header string
		path   string
		want   int
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
	ended := make(chan struct{}, 2)
	for _, n := range nodes[1:3] {
		go func() {
			_, _, _ = get(t, c, n, summaryPath, bearerAuth)
			ended <- struct{}{}
		}()
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
	Pod        string
	Time       time.Time
	Counter    uint64
	WorkingSet uint64
}

func summaryView(t *testing.T, n *Node) []podView {
	var out []podView
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
	must(t, f.SetPod("node-a", Pod{Namespace: "ns", Name: "a"}))
	must(t, f.SetPod("node-a", Pod{Namespace: "ns", Name: "b"}))
	must(t, f.SetPod("node-b", Pod{Namespace: "ns", Name: "c"}))
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
