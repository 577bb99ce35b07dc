package server

import (
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// testCA signs serving and client certificates for in-process tests.
type testCA struct {
	ca  *pki.CA
	pem []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	ca, err := pki.NewCA("test-ca", time.Now(), time.Hour)
	must(t, err)
	return &testCA{ca: ca, pem: ca.CertPEM()}
}

// issue returns a PEM pair: a serving pair for hosts, or a client pair
// when there are none.
func (ca *testCA) issue(t *testing.T, cn string, orgs []string, hosts ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	l := pki.Leaf{CommonName: cn, Organizations: orgs, Hosts: hosts, Server: len(hosts) > 0, Client: len(hosts) == 0}
	certPEM, keyPEM, err := ca.ca.Issue(time.Now(), l)
	must(t, err)
	return certPEM, keyPEM
}
