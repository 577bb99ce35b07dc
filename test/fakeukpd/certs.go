package fakeukpd

import (
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// CA is the certificate authority the fake serves TLS with.
type CA = pki.CA

const validity = 5 * 365 * 24 * time.Hour

// NewCA generates a CA valid from an hour before now.
func NewCA(now time.Time) (*CA, error) {
	return pki.NewCA("fake-ukpd-ca", now, validity)
}

// ServingLeaf is the fake's serving certificate for hosts (IP addresses or
// DNS names), for CA.TLSCertificate.
func ServingLeaf(hosts ...string) pki.Leaf {
	return pki.Leaf{CommonName: "fake-ukpd", Hosts: hosts, Server: true}
}
