package fakekubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

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

// newClient returns a client that trusts the fleet CA, optionally with a
// client certificate.
func newClient(t *testing.T, f *Fleet, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: certPool(f), Certificates: certs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// get fetches a node path with an optional Authorization header.
func get(t *testing.T, c *http.Client, n *Node, path, auth string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+n.Address()+path, nil)
	must(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
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
