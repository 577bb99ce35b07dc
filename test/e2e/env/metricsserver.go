package env

import (
	"cmp"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// MetricsServer is a metrics-server process serving on 127.0.0.1.
type MetricsServer struct {
	Process *cluster.Process
	Port    int

	cluster *cluster.Cluster
}

// StartMetricsServer runs bin/metrics-server as the cluster admin against the
// fleet whose CA is kubeletCAFile, with a serving certificate from the
// cluster CA, not registered with the aggregator, and waits until it is
// ready (has scraped every node once). metrics-server v0.8.0 wants
// resolution at least 10s and above timeout.
func StartMetricsServer(ctx context.Context, c *cluster.Cluster, binDir, kubeletCAFile string, resolution, timeout time.Duration) (*MetricsServer, error) {
	if err := CheckBinaries(binDir, cluster.MetricsServerBinary); err != nil {
		return nil, err
	}
	certFile, keyFile, err := c.IssueServingCert("metrics-server", "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	m, err := runMetricsServer(c, "metrics-server", binDir, c.KubeconfigPath(), ports[0], kubeletCAFile, resolution, timeout,
		"--tls-cert-file="+certFile,
		"--tls-private-key-file="+keyFile,
		"--kubelet-use-node-status-port",
	)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(m.RESTConfig())
	if err == nil {
		err = cluster.Poll(ctx, "metrics-server to be ready", []*cluster.Process{m.Process}, func(ctx context.Context) error {
			return client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		})
	}
	return m, err
}

// DeployMetricsServerManifests installs metrics-server v0.8.0 as its users
// do, from its own release manifests applied client-side (kubectl apply -f
// components.yaml): every object but the Deployment unchanged except the
// Service and APIService port, and the Deployment's container run as a
// local process with its own args plus what a process outside the cluster
// needs. It returns once v1beta1.metrics.k8s.io is Available.
func DeployMetricsServerManifests(ctx context.Context, c *cluster.Cluster, binDir, kubeletCAFile string, resolution, timeout time.Duration) (*MetricsServer, error) {
	dir, err := cluster.SourceDir(ctx, filepath.Join(binDir, cluster.MetricsServerBinary))
	if err != nil {
		return nil, err
	}
	objs, err := Render(ctx, c, filepath.Join(dir, "manifests", "overlays", "release"))
	if err != nil {
		return nil, err
	}
	deploy, err := find(objs, "Deployment", "metrics-server")
	if err != nil {
		return nil, err
	}
	ctr, spec, err := container(deploy, "metrics-server")
	if err != nil {
		return nil, err
	}
	port, _, err := applyOnLoopback(ctx, c, "metrics-server-release", objs, "--server-side=false")
	if err != nil {
		return nil, err
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, deploy.GetNamespace(), cmp.Or(spec.ServiceAccountName, "default"))
	if err != nil {
		return nil, err
	}
	m, err := runMetricsServer(c, "metrics-server-release", binDir, kubeconfig, port, kubeletCAFile, resolution, timeout, ctr.Args...)
	if err != nil {
		return nil, err
	}
	return m, c.WaitForAPIServiceAvailable(ctx, MetricsAPIServices[0])
}

// runMetricsServer starts bin/metrics-server as the process name with args
// and then what a process on the host needs.
func runMetricsServer(c *cluster.Cluster, name, binDir, kubeconfig string, port int, kubeletCAFile string, resolution, timeout time.Duration, args ...string) (*MetricsServer, error) {
	certDir := filepath.Join(c.WorkDir(), name+"-certs")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return nil, err
	}
	proc, err := c.StartProcess(name, filepath.Join(binDir, cluster.MetricsServerBinary), append(args,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+certDir,
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority="+kubeletCAFile,
		"--metric-resolution="+resolution.String(),
		"--kubelet-request-timeout="+timeout.String(),
	)...)
	if err != nil {
		return nil, err
	}
	return &MetricsServer{Process: proc, Port: port, cluster: c}, nil
}

// RESTConfig reaches metrics-server directly as the cluster admin.
func (m *MetricsServer) RESTConfig() *rest.Config {
	return adminConfig(m.cluster, net.JoinHostPort("127.0.0.1", strconv.Itoa(m.Port)), "", m.cluster.CACertPEM())
}
