package env

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// MetricsServer is a metrics-server process serving on 127.0.0.1 but not
// registered with the aggregator.
type MetricsServer struct {
	Process *cluster.Process
	Port    int

	cluster *cluster.Cluster
}

// StartMetricsServer runs bin/metrics-server as the cluster admin against the
// fleet whose CA is kubeletCAFile, with a serving certificate from the
// cluster CA, and waits until it is ready (has scraped every node once).
// metrics-server v0.8.0 wants resolution at least 10s and above timeout.
func StartMetricsServer(ctx context.Context, c *cluster.Cluster, binDir, kubeletCAFile string, resolution, timeout time.Duration) (*MetricsServer, error) {
	if err := CheckBinaries(binDir, cluster.MetricsServerBinary); err != nil {
		return nil, err
	}
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := c.IssueServingCert("metrics-server", "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(c.WorkDir(), "metrics-server")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return nil, err
	}
	kubeconfig := c.KubeconfigPath()
	args := append(metricsServerArgs(kubeconfig, ports[0], certDir, kubeletCAFile, resolution, timeout),
		"--tls-cert-file="+certFile,
		"--tls-private-key-file="+keyFile,
		"--kubelet-use-node-status-port",
	)
	proc, err := c.StartProcess("metrics-server", filepath.Join(binDir, cluster.MetricsServerBinary), args...)
	if err != nil {
		return nil, err
	}
	m := &MetricsServer{Process: proc, Port: ports[0], cluster: c}
	client, err := rest.HTTPClientFor(m.RESTConfig())
	if err != nil {
		return m, err
	}
	err = Poll(ctx, "metrics-server to be ready", []*cluster.Process{proc}, func(ctx context.Context) error {
		code, body, err := Get(ctx, client, m.RESTConfig().Host+"/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("readyz %d: %s", code, body)
		}
		return nil
	})
	return m, err
}

// metricsServerArgs are the flags a metrics-server process on the host
// needs: the cluster's kubeconfig for its client and delegated checks, a
// loopback port, a certificate directory, the fleet's CA.
func metricsServerArgs(kubeconfig string, port int, certDir, kubeletCAFile string, resolution, timeout time.Duration) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir,
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority=" + kubeletCAFile,
		"--metric-resolution=" + resolution.String(),
		"--kubelet-request-timeout=" + timeout.String(),
	}
}

// RESTConfig reaches metrics-server directly as the cluster admin.
func (m *MetricsServer) RESTConfig() *rest.Config {
	return adminConfig(m.cluster, net.JoinHostPort("127.0.0.1", strconv.Itoa(m.Port)), "", m.cluster.CACertPEM())
}
