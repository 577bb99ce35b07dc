package fakeukpd

import (
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// NewCA generates the CA the fake serves TLS with, valid from an hour
// before now.
func NewCA(now time.Time) (*pki.CA, error) {
	return pki.NewCA("fake-ukpd-ca", now, fakecore.CAValidity)
}

// ServingLeaf is the fake's serving certificate for hosts (IP addresses or
// DNS names).
func ServingLeaf(hosts ...string) pki.Leaf {
	return pki.Leaf{CommonName: "fake-ukpd", Hosts: hosts, Server: true}
}
