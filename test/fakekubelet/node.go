package fakekubelet

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// Node is one fake kubelet: a TLS listener on 127.0.0.1 and the pods bound
// to it. All methods are safe for concurrent use.
type Node struct {
	fleet       *Fleet
	name        string
	certificate tls.Certificate

	// mu guards the pod model and the faults.
	mu      sync.RWMutex
	start   instant
	pods    map[podKey]*podState
	kubelet counter // constant-rate system containers
	runtime counter
	podsCPU counter // sum of the pods' rates
	faults  FaultState
	// badCerts are the serving certificates of connection faults, made
	// when first needed.
	badCerts map[FaultKind]*tls.Certificate
	// held counts the connections a HandshakeStall holds.
	held atomic.Int32

	// opMu serialises changes of the serving state (Dead, revive, shutdown).
	opMu sync.Mutex

	// srvMu guards the serving state.
	srvMu     sync.Mutex
	port      int
	srv       *http.Server
	stop      chan struct{} // closed when the current server stops
	serveDone chan struct{}
}

func newNode(f *Fleet, name string, certificate tls.Certificate) *Node {
	now := f.tl.now()
	base := f.cfg.NodeBaseUsage.CPUNanoCores
	return &Node{
		fleet:       f,
		name:        name,
		certificate: certificate,
		start:       now,
		pods:        map[podKey]*podState{},
		kubelet:     counter{accAt: now, rate: base / 2},
		runtime:     counter{accAt: now, rate: base - base/2},
		podsCPU:     counter{accAt: now},
	}
}

// Name returns the node name.
func (n *Node) Name() string { return n.name }

// Port returns the TCP port the node listens on (also while Dead).
func (n *Node) Port() int {
	n.srvMu.Lock()
	defer n.srvMu.Unlock()
	return n.port
}

// Address returns host:port of the node's endpoint.
func (n *Node) Address() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port())) }

// URL returns the base URL of the node's endpoint.
func (n *Node) URL() string { return "https://" + n.Address() }

// listen opens the listener and starts serving. Callers hold no node locks.
func (n *Node) listen(port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           n,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: n.servingCertificate,
			// Verified per request, so that a bad certificate yields 401
			// rather than a failed handshake, as on a real kubelet.
			ClientAuth: tls.RequestClientCert,
		},
		ConnContext: fakecore.ConnContext,
		ErrorLog:    log.New(debugWriter{node: n.name}, "", 0),
	}
	stop, done := make(chan struct{}), make(chan struct{})
	n.srvMu.Lock()
	n.port = ln.Addr().(*net.TCPAddr).Port
	n.srv, n.stop, n.serveDone = srv, stop, done
	n.srvMu.Unlock()
	go func() {
		defer close(done)
		if err := srv.ServeTLS(&faultListener{Listener: ln, node: n, stop: stop}, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Fake kubelet stopped serving", "node", n.name)
		}
	}()
	return nil
}

// stopServing closes the listener and every connection and waits for the
// serve loop to return. It reports whether a server was running.
func (n *Node) stopServing() (bool, error) {
	n.srvMu.Lock()
	srv, stop, done := n.srv, n.stop, n.serveDone
	n.srv = nil
	n.srvMu.Unlock()
	if srv == nil {
		return false, nil
	}
	err := srv.Close()
	close(stop)
	<-done
	return true, err
}

// stopChan returns a channel closed when the current server stops.
func (n *Node) stopChan() <-chan struct{} {
	n.srvMu.Lock()
	defer n.srvMu.Unlock()
	if n.stop == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return n.stop
}

func (n *Node) shutdown() error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if _, err := n.stopServing(); err != nil {
		return fmt.Errorf("node %q: %w", n.name, err)
	}
	return nil
}

// kill makes the node Dead: its port refuses connections. Callers hold opMu.
func (n *Node) kill() error {
	if _, err := n.stopServing(); err != nil {
		return fmt.Errorf("stop node %q: %w", n.name, err)
	}
	return nil
}

// revive listens again on the node's port. Callers hold opMu.
func (n *Node) revive() error {
	if n.fleet.isClosed() {
		return errors.New("fleet is closed")
	}
	n.srvMu.Lock()
	running, port := n.srv != nil, n.port
	n.srvMu.Unlock()
	if running {
		return nil
	}
	if err := n.listen(port); err != nil {
		return fmt.Errorf("revive node %q: %w", n.name, err)
	}
	return nil
}

// debugWriter sends net/http's own log lines (TLS handshake errors from
// clients that hang up, and the like) to klog at high verbosity.
type debugWriter struct{ node string }

func (w debugWriter) Write(p []byte) (int, error) {
	klog.V(4).InfoS("Fake kubelet server log", "node", w.node, "message", string(p))
	return len(p), nil
}
