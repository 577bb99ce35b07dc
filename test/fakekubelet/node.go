package fakekubelet

import (
	"compress/gzip"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// Node is one fake kubelet: a TLS endpoint on 127.0.0.1 and the pods bound
// to it. All methods are safe for concurrent use.
type Node struct {
	fleet *Fleet
	name  string

	// The pod model and the faults, guarded by the fleet's mu.
	start   instant
	pods    map[podKey]*podState
	podsCPU counter             // sum of the pods' rates
	faults  map[FaultKind]Fault // by group (faultGroup)

	// opMu serialises changes of the serving state (faults, shutdown).
	opMu sync.Mutex
	// ep serves the node; set before the node is published.
	ep *fakecore.Endpoint
}

// Name returns the node name.
func (n *Node) Name() string { return n.name }

// Port returns the TCP port the node listens on (also while Dead).
func (n *Node) Port() int { return int(netip.MustParseAddrPort(n.ep.Addr()).Port()) }

// Address returns host:port of the node's endpoint.
func (n *Node) Address() string { return n.ep.Addr() }

// HeldConnections is how many connections a HandshakeStall holds now.
func (n *Node) HeldConnections() int { return n.ep.Held() }

// AddNode starts a fake kubelet for nodeName on 127.0.0.1:port; port 0 picks
// a free port, reported by Node.Port.
func (f *Fleet) AddNode(nodeName string, port int) (*Node, error) {
	if nodeName == "" {
		return nil, errors.New("node name must not be empty")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx.Err() != nil {
		return nil, errors.New("fleet is closed")
	}
	if _, ok := f.nodes[nodeName]; ok {
		return nil, fmt.Errorf("node %q already exists", nodeName)
	}
	now := f.tl.now()
	n := &Node{fleet: f, name: nodeName, start: now, pods: map[podKey]*podState{}, faults: map[FaultKind]Fault{}, podsCPU: counter{accAt: now}}
	ep, err := fakecore.NewEndpoint(fakecore.EndpointConfig{
		Addr:    fmt.Sprintf("127.0.0.1:%d", port),
		Handler: n,
		CA:      f.ca,
		Leaf:    pki.Leaf{CommonName: nodeName, Hosts: []string{"127.0.0.1", "localhost", nodeName}, Server: true},
		Now:     f.cfg.Clock.Now,
		// Verified per request, so that a bad certificate yields 401
		// rather than a failed handshake, as on a real kubelet.
		ClientAuth: tls.RequestClientCert,
	})
	if err != nil {
		return nil, fmt.Errorf("node %q: %w", nodeName, err)
	}
	n.ep = ep
	f.nodes[nodeName] = n
	return n, nil
}

const (
	summaryPath         = "/stats/summary"
	resourceMetricsPath = "/metrics/resource"
)

// contentTypes are the Content-Types of the paths' answers.
var contentTypes = map[string]string{summaryPath: "application/json", resourceMetricsPath: ResourceMetricsContentType}

// ServeHTTP serves the kubelet endpoints of this node.
func (n *Node) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Close waits for the requests that entered before it started.
	f := n.fleet
	f.lifeMu.Lock()
	if f.ctx.Err() != nil {
		f.lifeMu.Unlock()
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	f.handlers.Add(1)
	f.lifeMu.Unlock()
	defer f.handlers.Done()
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch _, known := contentTypes[path]; {
	case !f.authenticated(r):
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	case !known:
		http.NotFound(w, r)
		return
	case r.Method != http.MethodGet:
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	case n.serveFault(w, r, path):
		return
	}
	w.Header().Set("Content-Type", contentTypes[path])
	var err error
	if path == resourceMetricsPath && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		err = errors.Join(n.render(zw, r, path), zw.Close())
	} else {
		err = n.render(w, r, path)
	}
	if err != nil {
		klog.V(4).InfoS("Writing response failed", "node", n.name, "path", path, "err", err)
	}
}

// render writes path as the node serves it now, data faults included.
func (n *Node) render(w io.Writer, r *http.Request, path string) error {
	if path == summaryPath {
		only, _ := strconv.ParseBool(r.URL.Query().Get("only_cpu_and_memory"))
		return json.NewEncoder(w).Encode(n.Summary(only))
	}
	return WriteResourceMetrics(w, n.Summary(true))
}

// authenticated accepts a verified client certificate or a known bearer
// token.
func (f *Fleet) authenticated(r *http.Request) bool {
	if _, ok, _ := f.clientCerts.AuthenticateRequest(r); ok {
		return true
	}
	token := fakecore.BearerToken(r)
	ok := fakecore.KnownToken(token, f.cfg.Tokens...)
	if !ok && token != "" && f.cfg.TokenAuthenticator != nil {
		var err error
		if _, ok, err = f.cfg.TokenAuthenticator.AuthenticateToken(r.Context(), token); err != nil {
			klog.V(2).InfoS("Token review failed", "err", err)
			ok = false
		}
	}
	if ok {
		f.recordPresented(token)
	}
	return ok
}
