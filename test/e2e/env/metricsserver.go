package env

import (
	"cmp"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// StartMetricsServer runs bin/metrics-server as the process name and the
// cluster admin against the kubelets whose CA is kubeletCAFile, with a
// serving certificate from the cluster CA, not registered with the
// aggregator, and waits until it is ready (has scraped every node once). metrics-server v0.8.0 wants
// resolution at least 10s and above timeout.
func StartMetricsServer(ctx context.Context, c *cluster.Cluster, name, binDir, kubeletCAFile string, resolution, timeout time.Duration) (*MetricsServer, error) {
	if err := CheckBinaries(binDir, cluster.MetricsServerBinary); err != nil {
		return nil, err
	}
	return startReadyMetricsServer(ctx, c, name, binDir, c.KubeconfigPath(), kubeletCAFile, resolution, timeout,
		"--kubelet-use-node-status-port")
}

// DeployMetricsServerManifests installs metrics-server v0.8.0 as its users
// do, from its own release manifests applied client-side (kubectl apply -f
// components.yaml): every object but the Deployment unchanged except the
// Service and APIService port, and the Deployment's container run as a
// local process with its own args plus what a process outside the cluster
// needs. It returns once v1beta1.metrics.k8s.io is Available.
func DeployMetricsServerManifests(ctx context.Context, c *cluster.Cluster, binDir, kubeletCAFile string, resolution, timeout time.Duration) (*MetricsServer, error) {
	objs, ns, sa, args, err := metricsServerRelease(ctx, c, binDir)
	if err != nil {
		return nil, err
	}
	port, _, err := applyOnLoopback(ctx, c, "metrics-server-release", objs, "--server-side=false")
	if err != nil {
		return nil, err
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, ns, sa)
	if err != nil {
		return nil, err
	}
	m, err := runMetricsServer(c, "metrics-server-release", binDir, kubeconfig, port, kubeletCAFile, resolution, timeout, args...)
	if err != nil {
		return nil, err
	}
	return m, c.WaitForAPIServiceAvailable(ctx, MetricsAPIServices[0])
}

// StartMetricsServerWithOwnRBAC runs bin/metrics-server as StartMetricsServer
// does (a local process named name, not registered with the aggregator, a
// serving certificate from the cluster CA), but as the ServiceAccount of its
// release manifests with the RBAC they grant it, applied client-side as
// users apply components.yaml: its requests to kube-apiserver and to the
// kubelets (which authorize them as get nodes/metrics) carry its own
// identity, not the admin's. Nothing else of the release is applied: no
// Service, no APIService. remove deletes what was applied; the caller stops
// the process.
func StartMetricsServerWithOwnRBAC(ctx context.Context, c *cluster.Cluster, name, binDir, kubeletCAFile string, resolution, timeout time.Duration) (m *MetricsServer, remove func(context.Context) error, err error) {
	objs, ns, sa, args, err := metricsServerRelease(ctx, c, binDir)
	if err != nil {
		return nil, nil, err
	}
	rbac := slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool {
		return !slices.Contains([]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}, o.GetKind())
	})
	applied := name + "-rbac"
	if err := Apply(ctx, c, applied, rbac, "--server-side=false"); err != nil {
		return nil, nil, err
	}
	remove = func(ctx context.Context) error {
		_, _, err := c.Kubectl(ctx, "delete", "--ignore-not-found", "-f", filepath.Join(c.WorkDir(), "manifests", applied+".json"))
		return err
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, ns, sa)
	if err != nil {
		return nil, remove, err
	}
	// The release's args first: runMetricsServer's come after and override
	// the port, certificate directory, address types and resolution.
	m, err = startReadyMetricsServer(ctx, c, name, binDir, kubeconfig, kubeletCAFile, resolution, timeout, args...)
	return m, remove, err
}

// metricsServerRelease renders the release manifests of the metrics-server
// source bin/metrics-server was built from, and returns them with the
// namespace, ServiceAccount and container args of its Deployment.
func metricsServerRelease(ctx context.Context, c *cluster.Cluster, binDir string) (
	objs []*unstructured.Unstructured, ns, sa string, args []string, err error) {
	dir, err := cluster.SourceDir(ctx, filepath.Join(binDir, cluster.MetricsServerBinary))
	if err == nil {
		objs, err = Render(ctx, c, filepath.Join(dir, "manifests", "overlays", "release"))
	}
	var deploy *unstructured.Unstructured
	if err == nil {
		deploy, err = find(objs, "Deployment", "metrics-server")
	}
	if err != nil {
		return nil, "", "", nil, err
	}
	ctr, spec, err := container(deploy, "metrics-server")
	if err != nil {
		return nil, "", "", nil, err
	}
	return objs, deploy.GetNamespace(), cmp.Or(spec.ServiceAccountName, "default"), ctr.Args, nil
}

// startReadyMetricsServer runs metrics-server as name with args, a serving
// certificate from the cluster CA and a free port, and waits until it is
// ready.
func startReadyMetricsServer(ctx context.Context, c *cluster.Cluster, name, binDir, kubeconfig, kubeletCAFile string,
	resolution, timeout time.Duration, args ...string) (*MetricsServer, error) {
	certFile, keyFile, err := c.IssueServingCert(name, "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	args = append(slices.Clone(args), "--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile)
	m, err := runMetricsServer(c, name, binDir, kubeconfig, ports[0], kubeletCAFile, resolution, timeout, args...)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(m.RESTConfig())
	if err == nil {
		err = cluster.Poll(ctx, name+" to be ready", []*cluster.Process{m.Process}, func(ctx context.Context) error {
			return client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		})
	}
	return m, err
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
