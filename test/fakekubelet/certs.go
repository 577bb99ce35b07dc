package fakekubelet

import (
	"fmt"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// caValidity outlasts any run, even one whose fake clock moves ahead.
const caValidity = 10 * 365 * 24 * time.Hour

// newAuthority is the fleet's certificate authority. It signs every node's
// serving certificate and, on request, client certificates.
func newAuthority(now time.Time) (*pki.CA, error) {
	return pki.NewCA(fmt.Sprintf("fake-kubelet-ca@%d", now.Unix()), now, caValidity)
}

// servingLeaf is a node's serving certificate: valid for 127.0.0.1,
// localhost and the node's name.
func servingLeaf(nodeName string) pki.Leaf {
	return pki.Leaf{CommonName: nodeName, Hosts: []string{"127.0.0.1", "localhost", nodeName}, Server: true}
}
