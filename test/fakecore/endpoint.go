package fakecore

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// CAValidity is how long a fake's CA is valid: longer than any run, even on
// a fake clock that moves ahead.
const CAValidity = 10 * 365 * 24 * time.Hour

// EndpointConfig configures an Endpoint.
type EndpointConfig struct {
	// Addr is the loopback host:port to listen on; port 0 picks one, which
	// the endpoint keeps while it goes down and comes back.
	Addr       string
	Handler    http.Handler
	CA         *pki.CA // signs Leaf, and WrongNameCertificate's
	Leaf       pki.Leaf
	Now        func() time.Time // when certificates are issued; time.Now when nil
	ClientAuth tls.ClientAuthType
}

// Endpoint serves a fake over TLS on a loopback port and breaks the
// transport below HTTP: it can refuse connections (down), stall handshakes,
// or serve a certificate from an unknown CA or for another name. Changing
// any of that closes the open connections (idle HTTP/2 connections get a
// GOAWAY first), so clients meet the change on their next request. It is
// safe for concurrent use.
type Endpoint struct {
	cfg  EndpointConfig
	good tls.Certificate
	held atomic.Int32 // connections a HandshakeStall holds

	mu    sync.Mutex
	addr  string
	fault FaultKind
	down  bool
	bad   map[FaultKind]*tls.Certificate
	srv   *http.Server
	stop  chan struct{} // closed when srv stops
	done  chan struct{} // closed when srv's serve loop returns
}

// NewEndpoint issues the endpoint's certificate and serves cfg.Handler.
func NewEndpoint(cfg EndpointConfig) (*Endpoint, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Addr = cmp.Or(cfg.Addr, "127.0.0.1:0")
	if err := CheckLoopback("listen", cfg.Addr); err != nil {
		return nil, err
	}
	good, err := cfg.CA.TLSCertificate(cfg.Now(), cfg.Leaf)
	if err != nil {
		return nil, fmt.Errorf("serving certificate for %s: %w", cfg.Leaf.CommonName, err)
	}
	e := &Endpoint{cfg: cfg, good: good, addr: cfg.Addr, bad: map[FaultKind]*tls.Certificate{}}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.listenLocked(); err != nil {
		return nil, err
	}
	return e, nil
}

// Addr is the endpoint's host:port, also while down.
func (e *Endpoint) Addr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addr
}

// Held is how many connections a HandshakeStall holds now.
func (e *Endpoint) Held() int { return int(e.held.Load()) }

// Stopped returns a channel closed when the server now serving stops (at
// once when down): answers held back by a fault are abandoned then.
func (e *Endpoint) Stopped() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stop // stopLocked closes it, and it stays so while down
}

// SetFault sets one transport fault that breaks TLS (UntrustedCertificate,
// WrongNameCertificate or HandshakeStall), replacing any other; "" clears
// it.
func (e *Endpoint) SetFault(kind FaultKind) error {
	return e.update(kind, func() { e.fault = kind })
}

// SetDown closes the listener and every connection (down), or listens
// again on the same port.
func (e *Endpoint) SetDown(down bool) error {
	return e.update("", func() { e.down = down })
}

// Close stops serving for good.
func (e *Endpoint) Close() error { return e.SetDown(true) }

// update makes the certificate of kind, if not "", then applies change to
// the fault and down state and, if they changed, stops the server and
// listens again unless down.
func (e *Endpoint) update(kind FaultKind, change func()) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.prepareLocked(kind); err != nil {
		return err
	}
	fault, down := e.fault, e.down
	change()
	if fault == e.fault && down == e.down {
		return nil
	}
	e.stopLocked()
	if e.down {
		return nil
	}
	return e.listenLocked()
}

func (e *Endpoint) prepareLocked(kind FaultKind) error {
	switch {
	case kind == "" || kind == FaultHandshakeStall || e.bad[kind] != nil:
		return nil
	case kind != FaultUntrustedCertificate && kind != FaultWrongNameCertificate:
		return fmt.Errorf("unknown transport fault %q", kind)
	}
	// The right CA, but for a name the endpoint is not reached by.
	now, ca := e.cfg.Now(), e.cfg.CA
	leaf := pki.Leaf{CommonName: "not-" + e.cfg.Leaf.CommonName, Hosts: []string{"not-" + e.cfg.Leaf.CommonName + ".invalid", "127.0.0.254"}, Server: true}
	if kind == FaultUntrustedCertificate {
		// Right names, but signed by a CA nobody was told about, valid as
		// long as the endpoint's (fakes may run on a clock far from the
		// client's).
		var err error
		if ca, err = pki.NewCA("unknown-ca", now, ca.NotAfter().Sub(now)); err != nil {
			return fmt.Errorf("CA for %s: %w", kind, err)
		}
		leaf = e.cfg.Leaf
	}
	c, err := ca.TLSCertificate(now, leaf)
	if err != nil {
		return fmt.Errorf("certificate for %s: %w", kind, err)
	}
	e.bad[kind] = &c
	return nil
}

// listenLocked listens on the endpoint's address (its port, once known).
func (e *Endpoint) listenLocked() error {
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", e.addr, err)
	}
	e.addr = ln.Addr().String()
	cert := &e.good
	if c := e.bad[e.fault]; c != nil {
		cert = c
	}
	e.stop, e.done = make(chan struct{}), make(chan struct{})
	e.srv = &http.Server{
		Handler:           e.cfg.Handler,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}, ClientAuth: e.cfg.ClientAuth},
		ConnContext:       ConnContext,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	if e.fault == FaultHandshakeStall {
		ln = &stallListener{Listener: ln, stop: e.stop, held: &e.held}
	}
	// It returns when stopped; a failed listener is seen by clients as a
	// refused connection.
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		_ = srv.ServeTLS(ln, "", "")
	}(e.srv, e.done)
	return nil
}

// stopLocked stops the current server: answers held back by faults are
// released, idle connections told to go away (for at most 2s), the rest
// closed.
func (e *Endpoint) stopLocked() {
	if e.srv == nil {
		return
	}
	close(e.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = e.srv.Shutdown(ctx)
	cancel()
	_ = e.srv.Close()
	<-e.done
	e.srv = nil
}

// stallListener accepts connections and holds each without reading or
// writing, until stop closes; it never hands one on.
type stallListener struct {
	net.Listener
	stop <-chan struct{}
	held *atomic.Int32
}

func (l *stallListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.held.Add(1)
		go func() {
			<-l.stop
			_ = c.Close()
			l.held.Add(-1)
		}()
	}
}
