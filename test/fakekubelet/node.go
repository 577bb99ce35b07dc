package fakekubelet

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"slices"
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

	opMu sync.Mutex         // serialises changes of faults and shutdown
	ep   *fakecore.Endpoint // set before the node is published
}

func (n *Node) Name() string    { return n.name }
func (n *Node) Address() string { return n.ep.Addr() } // also while Dead
func (n *Node) Port() int       { return int(netip.MustParseAddrPort(n.ep.Addr()).Port()) }

// HeldConnections is how many connections a HandshakeStall holds now.
func (n *Node) HeldConnections() int { return n.ep.Held() }

// AddNode starts a fake kubelet for nodeName on 127.0.0.1:port (0 picks
// one).
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
	n := &Node{fleet: f, name: nodeName, start: now, pods: map[podKey]*podState{}, faults: map[FaultKind]Fault{},
		podsCPU: counter{accAt: now}}
	var err error
	n.ep, err = fakecore.NewEndpoint(fakecore.EndpointConfig{Addr: fmt.Sprintf("127.0.0.1:%d", port), Handler: n, CA: f.ca,
		Leaf: pki.Leaf{CommonName: nodeName, Hosts: []string{"127.0.0.1", "localhost", nodeName}, Server: true},
		Now:  f.cfg.Clock.Now,
		// Verified per request, so that a bad certificate yields 401
		// rather than a failed handshake, as on a real kubelet.
		ClientAuth: tls.RequestClientCert})
	if err != nil {
		return nil, fmt.Errorf("node %q: %w", nodeName, err)
	}
	f.nodes[nodeName] = n
	return n, nil
}

const (
	summaryPath         = "/stats/summary"
	resourceMetricsPath = "/metrics/resource"
)

var contentTypes = map[string]string{summaryPath: "application/json", resourceMetricsPath: ResourceMetricsContentType}

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
		// The kubelet's own words (k8s.io/kubernetes v1.37.2
		// pkg/kubelet/server/server.go, InstallAuthFilter).
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
	case !known:
		http.NotFound(w, r)
	case r.Method != http.MethodGet:
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	case !n.serveFault(w, r, path):
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
}

// render writes path as the node serves it now, data faults included.
func (n *Node) render(w io.Writer, r *http.Request, path string) error {
	if path == summaryPath {
		only, _ := strconv.ParseBool(r.URL.Query().Get("only_cpu_and_memory"))
		return json.NewEncoder(w).Encode(n.Summary(only))
	}
	return WriteResourceMetrics(w, n.Summary(true))
}

// authenticated accepts a verified client certificate or a bearer token.
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

// FaultKind names a misbehaviour of a node.
type FaultKind = fakecore.FaultKind

// A node's faults are fakecore's and these; faults of different groups
// (faultGroup) compose, and of one group the last set wins (README.md).
const (
	FaultDead          FaultKind = "Dead"          // closes the listener
	FaultDuplicatePods FaultKind = "DuplicatePods" // lists one pod of the node (or every one) twice
	FaultForeignPods   FaultKind = "ForeignPods"   // lists the pods of the fleet's other nodes too
)

// Fault is a fault to set on a node; as JSON, the body of
// PUT /v1/nodes/{node}/fault.
type Fault = fakecore.Fault

// Groups of faults of which one at most is in force; every other kind is a
// group of its own.
const (
	responseFaults  FaultKind = "response"
	transportFaults FaultKind = "transport"
)

// faultGroup returns the group of a known kind, and false for an unknown one.
func faultGroup(k FaultKind) (FaultKind, bool) {
	switch k {
	case fakecore.FaultStatus500, fakecore.FaultGarbage, fakecore.FaultHugeBody, fakecore.FaultResetConnection,
		fakecore.FaultStall, fakecore.FaultTruncated:
		return responseFaults, true
	case fakecore.FaultUntrustedCertificate, fakecore.FaultWrongNameCertificate, fakecore.FaultHandshakeStall:
		return transportFaults, true
	case fakecore.FaultSlow, fakecore.FaultClockBackwards, fakecore.FaultCounterReset, FaultDead, FaultDuplicatePods, FaultForeignPods:
		return k, true
	}
	return "", false
}

// Faults returns the faults in force, ordered by kind.
func (n *Node) Faults() []Fault {
	n.fleet.mu.RLock()
	defer n.fleet.mu.RUnlock()
	return slices.SortedFunc(maps.Values(n.faults), func(a, b Fault) int { return strings.Compare(string(a.Kind), string(b.Kind)) })
}

// SetFault sets a fault for the requests (or connections) that come after.
func (n *Node) SetFault(f Fault) error {
	group, ok := faultGroup(f.Kind)
	if !ok {
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	if err := f.Check(); err != nil {
		return err
	}
	switch {
	case f.Path != "":
		return fmt.Errorf("fault %s: a node's faults take no path", f.Kind)
	case f.Kind == FaultDuplicatePods:
		if ns, name, ok := strings.Cut(f.Pod, "/"); f.Pod != "" && (!ok || ns == "" || name == "") {
			return fmt.Errorf("fault %s: pod %q is not namespace/name", f.Kind, f.Pod)
		}
	case f.Kind == fakecore.FaultCounterReset:
		n.ResetCounters()
		return nil
	}
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if group == transportFaults {
		if err := n.ep.SetFault(f.Kind); err != nil {
			return fmt.Errorf("node %q: %w", n.name, err)
		}
	}
	n.fleet.mu.Lock()
	n.faults[group] = f
	n.fleet.mu.Unlock()
	if f.Kind == FaultDead {
		return n.ep.SetDown(true)
	}
	return nil
}

// ClearFault removes one fault, or all for ""; clearing Dead listens again
// on the same port.
func (n *Node) ClearFault(kind FaultKind) error {
	if _, ok := faultGroup(kind); !ok && kind != "" {
		return fmt.Errorf("unknown fault kind %q", kind)
	}
	n.opMu.Lock()
	defer n.opMu.Unlock()
	n.fleet.mu.Lock()
	_, wasDead := n.faults[FaultDead]
	maps.DeleteFunc(n.faults, func(_ FaultKind, f Fault) bool { return kind == "" || f.Kind == kind })
	transport := n.faults[transportFaults].Kind
	_, dead := n.faults[FaultDead]
	n.fleet.mu.Unlock()
	if err := n.ep.SetFault(transport); err != nil {
		return fmt.Errorf("node %q: %w", n.name, err)
	}
	if !wasDead || dead {
		return nil
	}
	if n.fleet.ctx.Err() != nil {
		return errors.New("fleet is closed")
	}
	if err := n.ep.SetDown(false); err != nil {
		n.fleet.mu.Lock()
		n.faults[FaultDead] = Fault{Kind: FaultDead}
		n.fleet.mu.Unlock()
		return fmt.Errorf("revive node %q: %w", n.name, err)
	}
	return nil
}

// serveFault applies Slow and the response fault, and reports whether a
// fault answered (or abandoned) the request.
func (n *Node) serveFault(w http.ResponseWriter, r *http.Request, path string) bool {
	n.fleet.mu.RLock()
	faults := maps.Clone(n.faults)
	n.fleet.mu.RUnlock()
	rs := fakecore.Responder{Clock: n.fleet.cfg.Clock, Stop: n.ep.Stopped()}
	if d := faults[fakecore.FaultSlow].Delay.Duration; d > 0 {
		rs.Wait(r.Context(), d)
	}
	fault, ok := faults[responseFaults]
	if !ok {
		return false
	}
	f := fakecore.Format{ContentType: contentTypes[path],
		Status500: func(w http.ResponseWriter) {
			http.Error(w, "Internal Error: failed to get node info: fake kubelet fault", http.StatusInternalServerError)
		},
		Garbage:     `{"node":{"nodeName":"` + n.name + `","cpu":{"time":"yesterday","usageNanoCores":-"}},"pods":[{` + "\x00\xff",
		StallPrefix: `{"node":{"nodeName":"` + n.name + `",`,
		Render: func() (int, []byte) {
			var body bytes.Buffer
			_ = n.render(&body, r, path)
			return http.StatusOK, body.Bytes()
		}}
	if path != summaryPath {
		f.Garbage = "# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total{ 1.0.0 not-a-number\n\x00\xff"
		f.StallPrefix = "# HELP "
	}
	return rs.Serve(w, r, fault.Kind, fault.Bytes, f)
}
