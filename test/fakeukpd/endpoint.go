package fakeukpd

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// FaultRefused, a transport fault of an Endpoint besides fakecore's,
// closes the listener: connections are refused. Transport faults live
// below HTTP, so they never reach the Server.
const FaultRefused FaultKind = "Refused"

// EndpointConfig configures an Endpoint.
type EndpointConfig struct {
	// Addr is the loopback host:port to listen on; port 0 picks one.
	Addr string
	// Certificate is the good serving certificate.
	Certificate tls.Certificate
	// CA, if set, signed Certificate; it issues the wrong-name certificate.
	CA *CA
}

// Endpoint serves a Server over TLS on a loopback address and can break the
// transport below HTTP. Changing its fault closes its open connections (idle
// HTTP/2 connections get a GOAWAY first), so clients meet the fault on their
// next request. It is safe for concurrent use.
type Endpoint struct {
	s    *Server
	cfg  EndpointConfig
	addr string

	mu    sync.Mutex
	fault FaultKind
	bad   map[FaultKind]*tls.Certificate
	srv   *http.Server
	stop  chan struct{} // closed when srv stops
	done  chan struct{} // closed when srv's serve loop returns
}

// NewEndpoint listens on cfg.Addr and serves s there.
func NewEndpoint(s *Server, cfg EndpointConfig) (*Endpoint, error) {
	e := &Endpoint{s: s, cfg: cfg, addr: cfg.Addr, bad: map[FaultKind]*tls.Certificate{}}
	if e.addr == "" {
		e.addr = "127.0.0.1:0"
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.listenLocked(); err != nil {
		return nil, err
	}
	return e, nil
}

// Addr is the endpoint's host:port.
func (e *Endpoint) Addr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addr
}

// URL is the endpoint's base URL.
func (e *Endpoint) URL() string { return "https://" + e.Addr() }

// TransportFault is the fault in force, or "".
func (e *Endpoint) TransportFault() FaultKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fault
}

// SetTransportFault sets one transport fault, replacing any other.
func (e *Endpoint) SetTransportFault(kind FaultKind) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.prepareLocked(kind); err != nil {
		return err
	}
	e.fault = kind
	e.stopLocked()
	if kind == FaultRefused {
		return nil
	}
	return e.listenLocked()
}

// ClearTransportFault serves normally again, on the same address.
func (e *Endpoint) ClearTransportFault() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fault = ""
	e.stopLocked()
	return e.listenLocked()
}

// Close stops serving and closes every connection.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fault = FaultRefused
	e.stopLocked()
	return nil
}

func (e *Endpoint) prepareLocked(kind FaultKind) error {
	switch kind {
	case FaultRefused, fakecore.FaultHandshakeStall:
		return nil
	case fakecore.FaultUntrustedCertificate, fakecore.FaultWrongNameCertificate:
	default:
		return fmt.Errorf("unknown transport fault %q", kind)
	}
	if e.bad[kind] != nil {
		return nil
	}
	now := time.Now()
	var (
		c   tls.Certificate
		err error
	)
	if kind == fakecore.FaultUntrustedCertificate {
		var other *CA
		if other, err = NewCA(now); err == nil {
			host, _, _ := net.SplitHostPort(e.addr)
			c, err = other.TLSCertificate(now, ServingLeaf(host, "localhost"))
		}
	} else {
		if e.cfg.CA == nil {
			return fmt.Errorf("fault %s needs the endpoint's CA", kind)
		}
		c, err = e.cfg.CA.TLSCertificate(now, ServingLeaf("wrong-name.invalid", "127.0.0.254"))
	}
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
		return fmt.Errorf("fake ukpd endpoint: listen on %s: %w", e.addr, err)
	}
	e.addr = ln.Addr().String()
	cert := &e.cfg.Certificate
	if c := e.bad[e.fault]; c != nil {
		cert = c
	}
	stop, done := make(chan struct{}), make(chan struct{})
	srv := &http.Server{
		Handler:           e.s,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}},
	}
	var l net.Listener
	if e.fault == fakecore.FaultHandshakeStall {
		l = &stallListener{Listener: ln, stop: stop}
	} else {
		l = ln
	}
	e.srv, e.stop, e.done = srv, stop, done
	go func() {
		defer close(done)
		// It returns when stopped; a failed listener is seen by clients as
		// a refused connection.
		_ = srv.ServeTLS(l, "", "")
	}()
	return nil
}

// shutdownGrace bounds the graceful part of stopping a server.
const shutdownGrace = 2 * time.Second

// stopLocked stops the current server: idle connections are told to go
// away, the rest closed.
func (e *Endpoint) stopLocked() {
	if e.srv == nil {
		return
	}
	close(e.stop)
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
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
}

func (l *stallListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		go func() {
			<-l.stop
			_ = c.Close()
		}()
	}
}
