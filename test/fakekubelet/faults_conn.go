package fakekubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// prepareConnectionFault makes the serving certificate a connection fault
// needs, once per node. Callers hold opMu.
func (n *Node) prepareConnectionFault(kind FaultKind) error {
	n.mu.RLock()
	_, ok := n.badCerts[kind]
	n.mu.RUnlock()
	if ok || kind == fakecore.FaultHandshakeStall {
		return nil
	}
	now := n.fleet.cfg.Clock.Now()
	var (
		c   tls.Certificate
		err error
	)
	switch kind {
	case fakecore.FaultUntrustedCertificate:
		// Right names, but signed by a CA nobody was told about.
		var other *pki.CA
		if other, err = newAuthority(now); err == nil {
			c, err = other.TLSCertificate(now, servingLeaf(n.name))
		}
	case fakecore.FaultWrongNameCertificate:
		// The fleet's CA, but for a name the node is not reached by.
		c, err = n.fleet.ca.TLSCertificate(now, pki.Leaf{
			CommonName: "not-" + n.name,
			Hosts:      []string{"not-" + n.name + ".invalid", "127.0.0.254"},
			Server:     true,
		})
	default:
		return fmt.Errorf("%s is not a connection fault", kind)
	}
	if err != nil {
		return fmt.Errorf("node %q: certificate for %s: %w", n.name, kind, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.badCerts == nil {
		n.badCerts = map[FaultKind]*tls.Certificate{}
	}
	n.badCerts[kind] = &c
	return nil
}

// servingCertificate is the node's tls.Config.GetCertificate: the node's
// own certificate unless a connection fault says otherwise.
func (n *Node) servingCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if c := n.badCerts[n.faults.Connection]; c != nil {
		return c, nil
	}
	return &n.certificate, nil
}

// bounce closes the node's listener and connections and listens again on
// the same port, so that clients connect afresh. Idle connections are shut
// down gracefully (HTTP/2 GOAWAY), so that clients know not to reuse them
// rather than fail a request on them. Callers hold opMu.
func (n *Node) bounce() error {
	n.srvMu.Lock()
	srv, stop, done := n.srv, n.stop, n.serveDone
	n.srv = nil
	n.srvMu.Unlock()
	if srv == nil {
		return nil
	}
	// Release stalled and slow requests first, so that every connection can
	// go idle.
	close(stop)
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	_ = srv.Shutdown(ctx)
	cancel()
	err := srv.Close()
	<-done
	if err != nil {
		return fmt.Errorf("node %q: %w", n.name, err)
	}
	return n.revive()
}

// shutdownGrace bounds the graceful part of bounce.
const shutdownGrace = 2 * time.Second

// faultListener hands the server the connections it accepts, except while
// the node's connection fault is HandshakeStall: then it keeps each new
// connection open without reading or writing a byte, until the server it
// belongs to stops.
type faultListener struct {
	net.Listener
	node *Node
	stop <-chan struct{}
}

func (l *faultListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.node.Faults().Connection != fakecore.FaultHandshakeStall {
			return c, nil
		}
		l.node.held.Add(1)
		go func() {
			<-l.stop
			_ = c.Close()
			l.node.held.Add(-1)
		}()
	}
}
