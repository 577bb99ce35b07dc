package fakekubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// t0 is a whole second, so sample instants fall on whole seconds from it.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const testToken = "test-token"

// requestTimeout bounds every request a test makes; it is a guard against
// hangs, never an assertion about speed.
const requestTimeout = 30 * time.Second

// must fails the test at once on an error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newTestFleet(t *testing.T, cfg Config) (*Fleet, *testingclock.FakeClock) {
	t.Helper()
	fc := testingclock.NewFakeClock(t0)
	if cfg.Clock == nil {
		cfg.Clock = fc
	}
	if cfg.Tokens == nil {
		cfg.Tokens = []string{testToken}
	}
	f, err := NewFleet(cfg)
	if err != nil {
		t.Fatalf("NewFleet: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f, fc
}

func addNode(t *testing.T, f *Fleet, name string) *Node {
	t.Helper()
	n, err := f.AddNode(name, 0)
	if err != nil {
		t.Fatalf("AddNode(%q): %v", name, err)
	}
	return n
}

func setPod(t *testing.T, f *Fleet, node string, p Pod) {
	t.Helper()
	if err := f.SetPod(node, p); err != nil {
		t.Fatalf("SetPod(%s/%s): %v", p.Namespace, p.Name, err)
	}
}

// containerUsage is a container's usage as a Summary reports it.
func containerUsage(c stats.ContainerStats) Usage {
	return Usage{CPUNanoCores: *c.CPU.UsageNanoCores, MemoryBytes: *c.Memory.WorkingSetBytes}
}

// URL returns the base URL of the node's endpoint.
func (n *Node) URL() string { return "https://" + n.Address() }

// certPool returns a pool holding the fleet CA.
func certPool(f *Fleet) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(f.CACertPEM())
	return p
}

// newClient returns a client that trusts the fleet CA, optionally with a
// client certificate.
func newClient(t *testing.T, f *Fleet, certs ...tls.Certificate) *http.Client {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: certPool(f), Certificates: certs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// get fetches a node path with an optional bearer token.
func get(t *testing.T, c *http.Client, n *Node, path, token string) (int, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+path, nil)
	must(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func mustGet(t *testing.T, c *http.Client, n *Node, path string) []byte {
	t.Helper()
	code, body, err := get(t, c, n, path, testToken)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if code != http.StatusOK {
		t.Fatalf("GET %s: status %d, body %q", path, code, body)
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

func clientCertificate(t *testing.T, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	must(t, err)
	return c
}

// otherCA returns a CA unrelated to the fleet's.
func otherCA(t *testing.T) *pki.CA {
	t.Helper()
	a, err := pki.NewCA("other-ca", t0, fakecore.CAValidity)
	must(t, err)
	return a
}
