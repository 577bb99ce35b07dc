package fakeukpd

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// Options say how Start serves a fake ukpd.
type Options struct {
	Config
	// Listen is the platform API's loopback host:port and ControlAddress
	// the control API's; port 0 picks a free one, and empty means
	// 127.0.0.1:0.
	Listen, ControlAddress string
	// CertDir, when set, makes the platform API serve TLS with a CA
	// generated now, whose certificate Start writes to <CertDir>/ca.crt;
	// plain HTTP when empty.
	CertDir string
}

// State is where a started fake ukpd serves. The fake-ukpd command writes
// it to its --state-file; read it with fakecore.ReadState.
type State struct {
	URL            string `json:"url"`
	ControlAddress string `json:"controlAddress"`
	CAFile         string `json:"caFile,omitempty"`
}

// Running is a fake ukpd serving its platform API and, in plain HTTP on
// loopback, its control API (README.md); State says where.
type Running struct {
	*Server
	State
	api            *fakecore.Endpoint // with TLS, else plain
	plain, control *fakecore.HTTPServer
}

// Start serves a fake ukpd as opts say. Close it when done.
func Start(opts Options) (_ *Running, err error) {
	r := &Running{Server: New(opts.Config)}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Close())
		}
	}()
	var caPEM []byte
	if opts.CertDir == "" {
		var addr string
		if r.plain, addr, err = fakecore.Listen(cmp.Or(opts.Listen, "127.0.0.1:0"), r.Server); err != nil {
			return nil, err
		}
		r.URL = "http://" + addr
	} else {
		var ca *pki.CA
		if ca, err = pki.NewCA("fake-ukpd-ca", time.Now(), fakecore.CAValidity); err != nil {
			return nil, err
		}
		leaf := pki.Leaf{CommonName: "fake-ukpd", Hosts: []string{"127.0.0.1", "::1", "localhost"}, Server: true}
		if host, _, _ := net.SplitHostPort(opts.Listen); host != "" {
			leaf.Hosts = append(leaf.Hosts, host)
		}
		if r.api, err = fakecore.NewEndpoint(fakecore.EndpointConfig{Addr: opts.Listen, Handler: r.Server, CA: ca, Leaf: leaf}); err != nil {
			return nil, err
		}
		caPEM, r.URL, r.CAFile = ca.CertPEM(), "https://"+r.api.Addr(), filepath.Join(opts.CertDir, "ca.crt")
		if err = cert.WriteCert(r.CAFile, caPEM); err != nil {
			return nil, err
		}
	}
	r.control, r.ControlAddress, err = fakecore.Listen(cmp.Or(opts.ControlAddress, "127.0.0.1:0"), NewControlHandler(r.Server, caPEM))
	if err != nil {
		return nil, err
	}
	return r, nil
}

// SetTransportFault breaks the platform API below HTTP: fakecore.FaultRefused
// closes its listener and connections, the others break TLS; "" serves it
// again, on the same address. A fake serving plain HTTP has none.
func (r *Running) SetTransportFault(kind fakecore.FaultKind) error {
	if r.api == nil {
		return fmt.Errorf("transport fault %q: serving plain HTTP", kind)
	}
	if kind == fakecore.FaultRefused {
		return r.api.SetDown(true)
	}
	// While down, a new fault is set before the endpoint listens again.
	if err := r.api.SetFault(kind); err != nil {
		return err
	}
	return r.api.SetDown(false)
}

// HeldConnections is how many connections a HandshakeStall holds now.
func (r *Running) HeldConnections() int {
	if r.api == nil {
		return 0
	}
	return r.api.Held()
}

// Close stops both APIs and ends the requests a slow fault holds.
func (r *Running) Close() error {
	r.Server.Close()
	var errs []error
	if r.api != nil {
		errs = append(errs, r.api.Close())
	}
	for _, s := range []*fakecore.HTTPServer{r.plain, r.control} {
		if s != nil {
			errs = append(errs, s.Stop())
		}
	}
	return errors.Join(errs...)
}
