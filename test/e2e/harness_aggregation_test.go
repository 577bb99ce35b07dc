//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	createMetricsServerRBAC(ctx, t)
	ports, err := cluster.FreePorts(1)
	must(t, err)
	port := ports[0]
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

	createAggregatedAPIService(ctx, t, port)
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
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
		_ = conn.Close()
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
	out, _, err := c.Kubectl(ctx, "get", "--raw", "/apis/metrics.k8s.io/v1beta1")
	must(t, err)
	var list metav1.APIResourceList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("parse discovery %q: %v", out, err)
	}
	if list.GroupVersion != "metrics.k8s.io/v1beta1" || len(list.APIResources) == 0 {
		t.Errorf("discovery through the aggregator = %+v", list)
	}
}

// checkDirectDiscovery waits until metrics-server, asked as the cluster
// admin, lists the resources of metrics.k8s.io/v1beta1: its certificate
// verifies against the cluster CA for serviceHost, and the admin's client
// certificate passes its delegated authentication and authorization.
func checkDirectDiscovery(ctx context.Context, t *testing.T, port int, serviceHost string, watch []*cluster.Process) {
	t.Helper()
	cfg := suite.cluster.RESTConfig()
	cfg.Host = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cfg.CAFile, cfg.CAData = "", suite.cluster.CACertPEM()
	cfg.ServerName = serviceHost
	cfg.Timeout = 10 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	must(t, err)
	must(t, cluster.Poll(ctx, "metrics-server to serve metrics.k8s.io/v1beta1", watch, func(context.Context) error {
		list, err := dc.ServerResourcesForGroupVersion("metrics.k8s.io/v1beta1")
		if err != nil {
			return err
		}
		if list.GroupVersion != "metrics.k8s.io/v1beta1" || len(list.APIResources) == 0 {
			return fmt.Errorf("discovery = %+v", list)
		}
		return nil
	}))
}

// createMetricsServerRBAC creates metrics-server's ServiceAccount in
// aggNamespace and what it needs: reading nodes and pods, delegating
// authentication and authorization, reading the authentication ConfigMap.
// The cluster-wide objects and the RoleBinding in kube-system are deleted
// when the test ends.
func createMetricsServerRBAC(ctx context.Context, t *testing.T) {
	t.Helper()
	client := suite.cluster.Client()
	opts := metav1.CreateOptions{}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	cleanup := func(what string, del func(context.Context) error) {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := del(ctx); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s: %v", what, err)
			}
		})
	}
	_, err := client.CoreV1().ServiceAccounts(aggNamespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: aggName}}, opts)
	check("service account", err)
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: aggNamespace, Name: aggName}}

	cleanup("cluster role", func(ctx context.Context) error {
		return client.RbacV1().ClusterRoles().Delete(ctx, aggRole, metav1.DeleteOptions{})
	})
	_, err = client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: aggRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		},
	}, opts)
	check("cluster role", err)
	for _, role := range []string{aggRole, "system:auth-delegator"} {
		name := aggRole + ":" + role
		cleanup("cluster role binding "+name, func(ctx context.Context) error {
			return client.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		})
		_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   subject,
		}, opts)
		check("cluster role binding "+name, err)
	}
	reader := aggRole + ":auth-reader"
	cleanup("role binding "+reader, func(ctx context.Context) error {
		return client.RbacV1().RoleBindings(metav1.NamespaceSystem).Delete(ctx, reader, metav1.DeleteOptions{})
	})
	_, err = client.RbacV1().RoleBindings(metav1.NamespaceSystem).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: reader},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   subject,
	}, opts)
	check("role binding "+reader, err)
}

// createAggregatedAPIService creates the ExternalName Service to
// localhost:port in aggNamespace and the APIService of aggGroup behind it,
// with the cluster CA as caBundle. The APIService is deleted when the test
// ends, if deleteAggregatedAPIService has not.
func createAggregatedAPIService(ctx context.Context, t *testing.T, port int) {
	t.Helper()
	_, err := suite.cluster.Client().CoreV1().Services(aggNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: aggName},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := suite.cluster.APIServices().Delete(ctx, aggVersion+"."+aggGroup, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete APIService: %v", err)
		}
	})
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": aggVersion + "." + aggGroup},
		"spec": map[string]any{
			"group":                aggGroup,
			"version":              aggVersion,
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
			"caBundle":             base64.StdEncoding.EncodeToString(suite.cluster.CACertPEM()),
			"service":              map[string]any{"namespace": aggNamespace, "name": aggName, "port": int64(port)},
		},
	}}
	if _, err := suite.cluster.APIServices().Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create APIService: %v", err)
	}
}

// deleteAggregatedAPIService deletes the APIService and waits until it is
// gone.
func deleteAggregatedAPIService(ctx context.Context, t *testing.T) {
	t.Helper()
	name := aggVersion + "." + aggGroup
	if err := suite.cluster.APIServices().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete APIService %s: %v", name, err)
	}
	if err := poll(ctx, "APIService "+name+" to be gone", func(ctx context.Context) error {
		_, err := suite.cluster.APIServices().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, fmt.Errorf("APIService %s still exists", name))
	}); err != nil {
		t.Error(err)
	}
}

// availableCondition returns the APIService's Available condition.
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
	cond := meta.FindStatusCondition(status.Conditions, "Available")
	if cond == nil {
		return nil, fmt.Errorf("APIService %s has no Available condition yet", name)
	}
	return cond, nil
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
