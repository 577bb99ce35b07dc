package env

import (
	"cmp"
	"context"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// metricsServerRBACKinds are the kinds of the objects that give metrics-server its
// identity and permissions in its release manifests.
var metricsServerRBACKinds = []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

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
	dir, err := cluster.SourceDir(ctx, filepath.Join(binDir, cluster.MetricsServerBinary))
	if err != nil {
		return nil, nil, err
	}
	objs, err := Render(ctx, c, filepath.Join(dir, "manifests", "overlays", "release"))
	if err != nil {
		return nil, nil, err
	}
	deploy, err := find(objs, "Deployment", "metrics-server")
	if err != nil {
		return nil, nil, err
	}
	ctr, spec, err := container(deploy, "metrics-server")
	if err != nil {
		return nil, nil, err
	}
	var rbac []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(metricsServerRBACKinds, o.GetKind()) {
			rbac = append(rbac, o)
		}
	}
	applied := name + "-rbac"
	if err := Apply(ctx, c, applied, rbac, "--server-side=false"); err != nil {
		return nil, nil, err
	}
	remove = func(ctx context.Context) error {
		_, _, err := c.Kubectl(ctx, "delete", "--ignore-not-found", "-f", filepath.Join(c.WorkDir(), "manifests", applied+".json"))
		return err
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, deploy.GetNamespace(), cmp.Or(spec.ServiceAccountName, "default"))
	if err != nil {
		return nil, remove, err
	}
	certFile, keyFile, err := c.IssueServingCert(name, "127.0.0.1", "localhost")
	if err != nil {
		return nil, remove, err
	}
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return nil, remove, err
	}
	// The release's args first (runMetricsServer's come after and override
	// the port, certificate directory, address types and resolution).
	args := append(slices.Clone(ctr.Args), "--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile)
	m, err = runMetricsServer(c, name, binDir, kubeconfig, ports[0], kubeletCAFile, resolution, timeout, args...)
	if err != nil {
		return nil, remove, err
	}
	client, err := kubernetes.NewForConfig(m.RESTConfig())
	if err == nil {
		err = cluster.Poll(ctx, name+" to be ready", []*cluster.Process{m.Process}, func(ctx context.Context) error {
			return client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		})
	}
	return m, remove, err
}
