package fakekubelet

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"

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
	n := &Node{
		fleet:   f,
		name:    nodeName,
		start:   now,
		pods:    map[podKey]*podState{},
		faults:  map[FaultKind]Fault{},
		podsCPU: counter{accAt: now},
	}
	ep, err := fakecore.NewEndpoint(fakecore.EndpointConfig{
		Addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
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
