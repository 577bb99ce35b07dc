package cluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/group-metrics-server/group-metrics-server/test/pki"
)

// ports are the loopback ports of the control plane.
type ports struct {
	etcdClient        int
	etcdPeer          int
	apiServer         int
	controllerManager int
	scheduler         int
	kwok              int
}

func (p ports) apiServerURL() string {
	return "https://" + net.JoinHostPort(loopback, strconv.Itoa(p.apiServer))
}

const loopback = "127.0.0.1"

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago, for servers started next to the cluster. All listeners are held until
// every port is picked, so the ports differ.
func FreePorts(n int) ([]int, error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// clusterPKI holds the certificates and keys of the control plane, as files.
type clusterPKI struct {
	ca           *authority
	frontProxyCA *authority

	apiServerCert, apiServerKey                 string
	frontProxyClientCert, frontProxyClientKey   string
	controllerManagerCert, controllerManagerKey string
	schedulerCert, schedulerKey                 string
	serviceAccountKey, serviceAccountPub        string

	// client certificates, by kubeconfig name
	clients map[string][2]string
}

// clientIdentities are the users the control plane's own kubeconfigs act as.
var clientIdentities = map[string]pki.Leaf{
	"admin":                   {CommonName: "kubernetes-admin", Organizations: []string{"system:masters"}, Client: true},
	"kube-controller-manager": {CommonName: "system:kube-controller-manager", Client: true},
	"kube-scheduler":          {CommonName: "system:kube-scheduler", Client: true},
	"kwok":                    {CommonName: "kwok-controller", Organizations: []string{"system:masters"}, Client: true},
}

func newClusterPKI(dir string) (*clusterPKI, error) {
	var (
		p   = &clusterPKI{clients: map[string][2]string{}}
		err error
	)
	if p.ca, err = newAuthority(dir, "ca"); err != nil {
		return nil, err
	}
	if p.frontProxyCA, err = newAuthority(dir, "front-proxy-ca"); err != nil {
		return nil, err
	}
	serving := []string{
		loopback, "localhost",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}
	if p.apiServerCert, p.apiServerKey, err = p.ca.issue(dir, "apiserver",
		pki.Leaf{CommonName: "kube-apiserver", Hosts: serving, Server: true}); err != nil {
		return nil, err
	}
	if p.frontProxyClientCert, p.frontProxyClientKey, err = p.frontProxyCA.issue(dir, "front-proxy-client",
		pki.Leaf{CommonName: "front-proxy-client", Client: true}); err != nil {
		return nil, err
	}
	local := []string{loopback, "localhost"}
	if p.controllerManagerCert, p.controllerManagerKey, err = p.ca.issue(dir, "controller-manager-serving",
		pki.Leaf{CommonName: "kube-controller-manager", Hosts: local, Server: true}); err != nil {
		return nil, err
	}
	if p.schedulerCert, p.schedulerKey, err = p.ca.issue(dir, "scheduler-serving",
		pki.Leaf{CommonName: "kube-scheduler", Hosts: local, Server: true}); err != nil {
		return nil, err
	}
	for name, req := range clientIdentities {
		certFile, keyFile, err := p.ca.issue(dir, name+"-client", req)
		if err != nil {
			return nil, err
		}
		p.clients[name] = [2]string{certFile, keyFile}
	}
	if p.serviceAccountKey, p.serviceAccountPub, err = writeServiceAccountKeys(dir); err != nil {
		return nil, err
	}
	return p, nil
}

func (c *Cluster) kubeconfigPath(name string) string {
	return filepath.Join(c.workDir, "kubeconfigs", name+".kubeconfig")
}

// writeKubeconfigs writes a kubeconfig for each client identity and builds the
// admin client.
func (c *Cluster) writeKubeconfigs() error {
	for name, files := range c.pki.clients {
		certPEM, err := os.ReadFile(files[0])
		if err != nil {
			return err
		}
		keyPEM, err := os.ReadFile(files[1])
		if err != nil {
			return err
		}
		user := &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
		if err := c.writeKubeconfig(c.kubeconfigPath(name), name, user); err != nil {
			return err
		}
	}
	c.adminKubeconfig = c.kubeconfigPath("admin")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.adminKubeconfig)
	if err != nil {
		return fmt.Errorf("load admin kubeconfig: %w", err)
	}
	cfg.QPS = 500
	cfg.Burst = 1000
	c.restConfig = cfg
	if c.client, err = kubernetes.NewForConfig(rest.CopyConfig(cfg)); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	return nil
}

func (c *Cluster) writeKubeconfig(path, user string, auth *clientcmdapi.AuthInfo) error {
	const clusterName = "gms-local"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{
		Server:                   c.ports.apiServerURL(),
		CertificateAuthorityData: c.pki.ca.certPEM(),
	}
	cfg.AuthInfos[user] = auth
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = user
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
