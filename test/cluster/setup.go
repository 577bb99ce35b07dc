package cluster

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const loopback = "127.0.0.1"

func hostPort(port int) string { return net.JoinHostPort(loopback, strconv.Itoa(port)) }

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

func (c *Cluster) kubeconfigPath(name string) string {
	return filepath.Join(c.workDir, "kubeconfigs", name+".kubeconfig")
}

// writeKubeconfigs writes a kubeconfig for each client identity and builds the
// admin client.
func (c *Cluster) writeKubeconfigs() error {
	for name, leaf := range clientIdentities {
		certPEM, keyPEM, err := c.pki.ca.Issue(time.Now(), leaf)
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
	if c.dynamic, err = dynamic.NewForConfig(rest.CopyConfig(cfg)); err != nil {
		return fmt.Errorf("admin dynamic client: %w", err)
	}
	return nil
}

func (c *Cluster) writeKubeconfig(path, user string, auth *clientcmdapi.AuthInfo) error {
	const clusterName = "gms-local"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{
		Server:                   c.APIServerURL(),
		CertificateAuthorityData: c.pki.ca.CertPEM(),
	}
	cfg.AuthInfos[user] = auth
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = user
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
