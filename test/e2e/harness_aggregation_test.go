//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
)

// The APIService metrics-server sits behind in TestAggregatedAPIService: a
// group of its own, as metrics.k8s.io is the suite's server's.
const (
	aggNamespace = "e2e-aggregation"
	aggName      = "metrics-server"
	aggProcess   = "metrics-server-aggregation"
	aggGroup     = "aggregation.e2e.group-metrics-server.io"
	aggVersion   = "v1beta1"
	aggRole      = "e2e-aggregation:metrics-server"
)

// TestAggregatedAPIService runs metrics-server outside the cluster behind an
// APIService of a group of its own (metrics.k8s.io is the suite's server's):
// the aggregator's probe getting its 404, not 401 or 403, shows that the
// Service, caBundle and delegated auth work.
func TestAggregatedAPIService(t *testing.T) {
	ctx := begin(t, 3*time.Minute)
	c := suite.cluster
	before := suiteAPIServiceSpecs(ctx, t)

	newNamespace(ctx, t, aggNamespace)
	ports, err := cluster.FreePorts(1)
	must(t, err)
	port := ports[0]
	applyObjects(ctx, t, "metrics-server", fmt.Sprintf(aggregationObjects, aggNamespace, aggName, aggRole, port))
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, aggNamespace, aggName)
	must(t, err)
	serviceHost := aggName + "." + aggNamespace + ".svc"
	certFile, keyFile, err := c.IssueServingCert(aggProcess, "127.0.0.1", "localhost", serviceHost)
	must(t, err)
	ms, err := c.StartProcess(aggProcess, filepath.Join(suite.binDir, cluster.MetricsServerBinary),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+certFile,
		"--tls-private-key-file="+keyFile,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		// No node: its token goes to no kubelet of the fleet, whose
		// presented tokens TestKubeletCredentialReadOnly reads.
		"--node-selector=e2e-aggregation-no-node=true",
	)
	must(t, err)
	t.Cleanup(func() { _ = ms.Stop() })
	watch := append(watched(), ms)
	checkDirectDiscovery(ctx, t, port, serviceHost, watch)

	applyObjects(ctx, t, "apiservice", fmt.Sprintf(aggregationAPIService, aggGroup, aggVersion, aggNamespace, aggName, port,
		base64.StdEncoding.EncodeToString(suite.cluster.CACertPEM())))
	apiService := aggVersion + "." + aggGroup
	probed := fmt.Sprintf("https://localhost:%d/apis/%s/%s", port, aggGroup, aggVersion)
	began := time.Now()
	must(t, cluster.Poll(ctx, "the aggregator to reach metrics-server", watch, func(ctx context.Context) error {
		cond, err := availableCondition(ctx, apiService)
		if err != nil {
			return err
		}
		if cond.Reason != "FailedDiscoveryCheck" || !strings.Contains(cond.Message, probed) || !strings.HasSuffix(cond.Message, ": 404") {
			return fmt.Errorf("Available=%s (%s: %s), want FailedDiscoveryCheck with a 404 from %s", cond.Status, cond.Reason, cond.Message, probed)
		}
		return nil
	}))
	t.Logf("the aggregator reached metrics-server at %s %v after the APIService was created", probed, since(began))

	deleteAggregatedAPIService(ctx, t)
	if err := ms.Stop(); err != nil {
		t.Errorf("stop metrics-server: %v", err)
	}
	if dialLoopback(port) == nil {
		t.Errorf("metrics-server's port %d still accepts connections after Stop", port)
	}

	// Setup's DeployServer waited until the suite's APIServices, which
	// lead to the server through an ExternalName Service the same way,
	// were Available; cheaply, they still are, unchanged, and discovery
	// through the aggregator lists the server's resources.
	if diff := cmp.Diff(before, suiteAPIServiceSpecs(ctx, t)); diff != "" {
		t.Errorf("the suite's APIServices changed (-before +after):\n%s", diff)
	}
	for _, name := range suite.server.APIServices {
		if err := c.WaitForAPIServiceAvailable(ctx, name); err != nil {
			t.Error(err)
		}
	}
	if err := discoverMetrics(c.Client().Discovery()); err != nil {
		t.Errorf("discovery through the aggregator: %v", err)
	}
}

// discoverMetrics checks that dc lists the resources of
// metrics.k8s.io/v1beta1.
func discoverMetrics(dc discovery.DiscoveryInterface) error {
	list, err := dc.ServerResourcesForGroupVersion("metrics.k8s.io/v1beta1")
	if err == nil && (list.GroupVersion != "metrics.k8s.io/v1beta1" || len(list.APIResources) == 0) {
		err = fmt.Errorf("discovery = %+v", list)
	}
	return err
}

// checkDirectDiscovery waits until metrics-server, asked as the cluster
// admin, lists the resources of metrics.k8s.io/v1beta1: its certificate
// verifies against the cluster CA for serviceHost, and the admin's client
// certificate passes its delegated authentication and authorization.
func checkDirectDiscovery(ctx context.Context, t *testing.T, port int, serviceHost string, watch []*cluster.Process) {
	t.Helper()
	cfg := suite.cluster.RESTConfig()
	cfg.Host = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cfg.CAFile, cfg.CAData, cfg.ServerName, cfg.Timeout = "", suite.cluster.CACertPEM(), serviceHost, 10*time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	must(t, err)
	must(t, cluster.Poll(ctx, "metrics-server to serve metrics.k8s.io/v1beta1", watch,
		func(context.Context) error { return discoverMetrics(dc) }))
}

// aggregationObjects are metrics-server's ServiceAccount in namespace %[1]s
// and what it needs: reading nodes and pods, delegating authentication and
// authorization, reading the authentication ConfigMap; and the ExternalName
// Service to localhost:%[4]d.
const aggregationObjects = `
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ServiceAccount, metadata: {name: %[2]s, namespace: %[1]s}}
- apiVersion: v1
  kind: Service
  metadata: {name: %[2]s, namespace: %[1]s}
  spec: {type: ExternalName, externalName: localhost, ports: [{name: https, port: %[4]d}]}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: "%[3]s"}
  rules:
  - {apiGroups: [""], resources: [nodes/metrics], verbs: [get]}
  - {apiGroups: [""], resources: [pods, nodes], verbs: [get, list, watch]}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: "%[3]s:%[3]s"}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "%[3]s"}
  subjects: [{kind: ServiceAccount, namespace: %[1]s, name: %[2]s}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: "%[3]s:system:auth-delegator"}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:auth-delegator"}
  subjects: [{kind: ServiceAccount, namespace: %[1]s, name: %[2]s}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: "%[3]s:auth-reader", namespace: kube-system}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
  subjects: [{kind: ServiceAccount, namespace: %[1]s, name: %[2]s}]
`

// aggregationAPIService is the APIService of group %[1]s version %[2]s
// behind the Service %[3]s/%[4]s on port %[5]d, with caBundle %[6]s.
const aggregationAPIService = `
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: %[2]s.%[1]s}
spec:
  group: %[1]s
  version: %[2]s
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: %[6]s
  service: {namespace: %[3]s, name: %[4]s, port: %[5]d}
`

// applyObjects applies manifest with kubectl and deletes its objects when
// the test ends.
func applyObjects(ctx context.Context, t *testing.T, name, manifest string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	must(t, os.WriteFile(path, []byte(manifest), 0o644))
	cleanup(t, "delete the "+name+" objects", func(ctx context.Context) error {
		_, _, err := suite.cluster.Kubectl(ctx, "delete", "--ignore-not-found", "-f", path)
		return err
	})
	_, _, err := suite.cluster.Kubectl(ctx, "apply", "-f", path)
	must(t, err)
}

// deleteAggregatedAPIService deletes the APIService and waits until it is
// gone.
func deleteAggregatedAPIService(ctx context.Context, t *testing.T) {
	t.Helper()
	name := aggVersion + "." + aggGroup
	if err := suite.cluster.APIServices().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete APIService %s: %v", name, err)
	}
	if err := waitGone(ctx, "APIService "+name, func(ctx context.Context) error {
		_, err := suite.cluster.APIServices().Get(ctx, name, metav1.GetOptions{})
		return err
	}); err != nil {
		t.Error(err)
	}
}

func availableCondition(ctx context.Context, name string) (*metav1.Condition, error) {
	obj, err := suite.cluster.APIServices().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var status struct {
		Conditions []metav1.Condition `json:"conditions"`
	}
	raw, _, _ := unstructured.NestedMap(obj.Object, "status")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &status); err != nil {
		return nil, fmt.Errorf("read APIService %s conditions: %w", name, err)
	}
	if cond := meta.FindStatusCondition(status.Conditions, "Available"); cond != nil {
		return cond, nil
	}
	return nil, fmt.Errorf("APIService %s has no Available condition yet", name)
}

// suiteAPIServiceSpecs returns the spec of each of the suite's server's
// APIServices but the caBundle, which its certificate controller may
// rotate.
func suiteAPIServiceSpecs(ctx context.Context, t *testing.T) map[string]map[string]any {
	t.Helper()
	specs := map[string]map[string]any{}
	for _, name := range suite.server.APIServices {
		obj, err := suite.cluster.APIServices().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
		delete(spec, "caBundle")
		specs[name] = spec
	}
	return specs
}
