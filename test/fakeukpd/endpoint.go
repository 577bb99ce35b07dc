package fakeukpd

import (
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
	// CA signs the serving certificate, for Hosts (IP addresses or DNS
	// names), and the wrong-name one of WrongNameCertificate.
	CA    *CA
	Hosts []string
}

// Endpoint serves a Server over TLS on a loopback address with one
// transport fault at a time: Refused or one of fakecore's. It is safe for
// concurrent use.
type Endpoint struct {
	ep *fakecore.Endpoint
}

// NewEndpoint listens on cfg.Addr and serves s there.
func NewEndpoint(s *Server, cfg EndpointConfig) (*Endpoint, error) {
	ep, err := fakecore.NewEndpoint(fakecore.EndpointConfig{
		Addr:    cfg.Addr,
		Handler: s,
		CA:      cfg.CA,
		Leaf:    ServingLeaf(cfg.Hosts...),
	})
	if err != nil {
		return nil, err
	}
	return &Endpoint{ep: ep}, nil
}

// Addr is the endpoint's host:port.
func (e *Endpoint) Addr() string { return e.ep.Addr() }

// URL is the endpoint's base URL.
func (e *Endpoint) URL() string { return "https://" + e.Addr() }

// SetTransportFault sets one transport fault, replacing any other.
func (e *Endpoint) SetTransportFault(kind FaultKind) error {
	if kind == FaultRefused {
		if err := e.ep.SetDown(true); err != nil {
			return err
		}
		return e.ep.SetFault("")
	}
	if !fakecore.IsTransportFault(kind) {
		return fakecore.UnknownTransportFault(kind)
	}
	if err := e.ep.SetFault(kind); err != nil {
		return err
	}
	return e.ep.SetDown(false)
}

// ClearTransportFault serves normally again, on the same address.
func (e *Endpoint) ClearTransportFault() error {
	if err := e.ep.SetFault(""); err != nil {
		return err
	}
	return e.ep.SetDown(false)
}

// Close stops serving and closes every connection.
func (e *Endpoint) Close() error { return e.ep.Close() }
