package cluster

import (
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// certValidity is long enough for any test run and short enough that a
// forgotten work directory does not hold credentials that matter.
const certValidity = 7 * 24 * time.Hour

// clusterPKI holds the certificates and keys of the control plane in dir:
// ca.crt and front-proxy-ca.crt (their keys stay in memory), <name>.crt and
// <name>.key for the serving leaves and the front proxy's client, and
// sa.key, the key that signs service-account tokens (kube-apiserver
// verifies them with its public half). The clientIdentities' certificates
// live in their kubeconfigs only.
type clusterPKI struct {
	dir              string
	ca, frontProxyCA *pki.CA
}

// clientIdentities are the users the control plane's own kubeconfigs act as,
// by kubeconfig name.
var clientIdentities = map[string]pki.Leaf{
	"admin":                   {CommonName: "kubernetes-admin", Organizations: []string{"system:masters"}, Client: true},
	"kube-controller-manager": {CommonName: "system:kube-controller-manager", Client: true},
	"kube-scheduler":          {CommonName: "system:kube-scheduler", Client: true},
	"kwok":                    {CommonName: "kwok-controller", Organizations: []string{"system:masters"}, Client: true},
}

func newClusterPKI(dir string) (*clusterPKI, error) {
	now := time.Now()
	p := &clusterPKI{dir: dir}
	var err error
	if p.ca, err = pki.NewCA("ca", now, certValidity); err != nil {
		return nil, err
	}
	if p.frontProxyCA, err = pki.NewCA("front-proxy-ca", now, certValidity); err != nil {
		return nil, err
	}
	for name, ca := range map[string]*pki.CA{"ca": p.ca, "front-proxy-ca": p.frontProxyCA} {
		if err := cert.WriteCert(p.file(name+".crt"), ca.CertPEM()); err != nil {
			return nil, err
		}
	}
	local := []string{loopback, "localhost"}
	serving := append(local, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	leaves := map[string]pki.Leaf{
		"apiserver":                  {CommonName: "kube-apiserver", Hosts: serving, Server: true},
		"controller-manager-serving": {CommonName: "kube-controller-manager", Hosts: local, Server: true},
		"scheduler-serving":          {CommonName: "kube-scheduler", Hosts: local, Server: true},
		// kube-apiserver's client to kubelets (exec, logs); a real node's
		// kubelet authorizes its user (node.go, ensureKubeletAPIAdmin).
		"apiserver-kubelet-client": {CommonName: apiserverKubeletClient, Client: true},
	}
	for name, l := range leaves {
		if _, _, err := p.ca.IssueFiles(now, dir, name, l); err != nil {
			return nil, err
		}
	}
	if _, _, err := p.frontProxyCA.IssueFiles(now, dir, "front-proxy-client", pki.Leaf{CommonName: "front-proxy-client", Client: true}); err != nil {
		return nil, err
	}
	key, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	return p, keyutil.WriteKey(p.file("sa.key"), key)
}

// file is the path of the PKI file name, "apiserver.crt" say.
func (p *clusterPKI) file(name string) string { return filepath.Join(p.dir, name) }
