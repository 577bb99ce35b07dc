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
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{ca: ca, pem: ca.CertPEM()}
}

// issue returns a PEM pair. Serving certificates cover 127.0.0.1 and
// localhost.
func (ca *testCA) issue(t *testing.T, cn string, orgs []string, serving bool) (certPEM, keyPEM []byte) {
	t.Helper()
	l := pki.Leaf{CommonName: cn, Organizations: orgs, Client: !serving, Server: serving}
	if serving {
		l.Hosts = []string{"127.0.0.1", "localhost"}
	}
	certPEM, keyPEM, err := ca.ca.Issue(time.Now(), l)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// issueFor returns a serving pair for the DNS names only, without IP SANs.
func (ca *testCA) issueFor(t *testing.T, cn string, dns []string) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := ca.ca.Issue(time.Now(), pki.Leaf{CommonName: cn, Hosts: dns, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}
