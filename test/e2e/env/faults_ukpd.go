package env

import (
	"errors"
	"fmt"

	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// BreakTransport takes the platform API off its address and serves it
// there through a fakeukpd.Endpoint with a transport fault below HTTP
// (fakeukpd.FaultRefused, FaultUntrustedCertificate, FaultHandshakeStall;
// the wrong-name fault needs the CA, which Ukpd does not keep). The
// returned heal puts the platform API back as it was.
func (u *Ukpd) BreakTransport(kind fakeukpd.FaultKind) (heal func() error, err error) {
	u.mu.Lock()
	cert := u.tls.Certificates[0]
	addr := u.addr
	u.mu.Unlock()
	if err := u.Down(); err != nil {
		return nil, fmt.Errorf("fake ukpd: take the platform API down: %w", err)
	}
	ep, err := fakeukpd.NewEndpoint(u.Server, fakeukpd.EndpointConfig{Addr: addr, Certificate: cert})
	if err == nil {
		err = ep.SetTransportFault(kind)
		if err != nil {
			err = errors.Join(err, ep.Close())
		}
	}
	if err != nil {
		return nil, errors.Join(err, u.Up())
	}
	return func() error { return errors.Join(ep.Close(), u.Up()) }, nil
}
