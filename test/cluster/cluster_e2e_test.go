//go:build e2e

package cluster_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

const kubeVersion = "v1.37.2"

// binDir returns $GMS_BIN_DIR or <repo>/bin, failing the test when a binary
// the cluster needs is missing.
func binDir(t *testing.T) string {
	t.Helper()
	dir, err := env.BinDir()
	if err == nil {
		err = env.CheckBinaries(dir,
			cluster.EtcdBinary, cluster.APIServerBinary, cluster.ControllerManagerBinary,
			cluster.SchedulerBinary, cluster.KubectlBinary, cluster.KwokBinary)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestClusterSmoke(t *testing.T) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	began := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{BinDir: binDir(t), WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster started in %v, ports %v", time.Since(began).Round(time.Millisecond), c.Ports())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process logs:\n%s", c.LogTails(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})

	testCtx, testCancel := context.WithTimeout(ctx, 3*time.Minute)
	defer testCancel()

	checkVersions(testCtx, t, c)
	checkWorkloads(testCtx, t, c)

	// Cancelling the context passed to Start tears the cluster down.
	ports := c.Ports()
	procs := c.Processes()
	cancel()
	select {
	case <-c.Stopped():
	case <-time.After(time.Minute):
		t.Fatal("cluster did not stop within a minute of its context being cancelled")
	}
	if err := c.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	for _, p := range procs {
		select {
		case <-p.Done():
		default:
			t.Errorf("process %s (pid %d) still running after Stop", p.Name(), p.Pid())
		}
	}
	for name, port := range ports {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			_ = conn.Close()
			t.Errorf("%s port %d still accepts connections after Stop", name, port)
		}
	}
}

func checkVersions(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	out, _, err := c.Kubectl(ctx, "version", "--output=json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("parse kubectl version output %q: %v", out, err)
	}
	if v.ClientVersion.GitVersion != kubeVersion || v.ServerVersion.GitVersion != kubeVersion {
		t.Errorf("kubectl version: client %q, server %q; want %s for both",
			v.ClientVersion.GitVersion, v.ServerVersion.GitVersion, kubeVersion)
	}
}

func checkWorkloads(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	client := c.Client()
	const nodeName, kubeletPort = "kwok-node-0", 10250
	if err := c.AddNode(ctx, nodeName, map[string]string{"pool": "smoke"}, "", kubeletPort); err != nil {
		t.Fatal(err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Status.DaemonEndpoints.KubeletEndpoint.Port; got != kubeletPort {
		t.Errorf("node kubelet port = %d, want %d", got, kubeletPort)
	}
	if got := internalIP(node); got != "127.0.0.1" {
		t.Errorf("node InternalIP = %q, want 127.0.0.1", got)
	}

	const ns = "smoke"
	if _, err := client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pod admission needs the namespace's default ServiceAccount.
	poll(ctx, t, "default ServiceAccount in "+ns, func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})

	labels := map[string]string{"app": "smoke"}
	bound := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bound", Labels: map[string]string{"app": "bound"}},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "fake"}}},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, bound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas := int32(2)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "fake"}}},
			},
		},
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	poll(ctx, t, "pod bound to be Running", func(ctx context.Context) error {
		return podRunning(ctx, client, ns, "bound", nodeName)
	})
	poll(ctx, t, "deployment smoke to have 2 ready replicas", func(ctx context.Context) error {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, "smoke", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != 2 {
			return fmt.Errorf("%d ready replicas", d.Status.ReadyReplicas)
		}
		return nil
	})
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=smoke"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("deployment has %d pods, want 2", len(pods.Items))
	}
	for _, p := range pods.Items {
		if err := podRunning(ctx, client, ns, p.Name, nodeName); err != nil {
			t.Error(err)
		}
	}
}

func internalIP(node *corev1.Node) string {
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func podRunning(ctx context.Context, client kubernetes.Interface, ns, name, nodeName string) error {
	p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if p.Spec.NodeName != nodeName {
		return fmt.Errorf("pod %s is on node %q, want %q", name, p.Spec.NodeName, nodeName)
	}
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod %s is %s", name, p.Status.Phase)
	}
	if p.Status.PodIP == "" || p.Status.HostIP != "127.0.0.1" {
		return fmt.Errorf("pod %s has pod IP %q and host IP %q", name, p.Status.PodIP, p.Status.HostIP)
	}
	return nil
}

// poll waits until check succeeds or ctx ends, failing the test with the
// last error.
func poll(ctx context.Context, t *testing.T, what string, check func(context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := check(ctx)
		if err != nil && ctx.Err() == nil {
			last = err
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, errors.Join(err, last))
	}
}

// TestAggregatedAPIService runs metrics-server outside the cluster as the
// backend of v1beta1.metrics.k8s.io, reached through an ExternalName Service,
// with a ServiceAccount kubeconfig and a serving certificate from the cluster
// CA: the same plumbing an aggregated server under test uses.
func TestAggregatedAPIService(t *testing.T) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	bin := binDir(t)
	msBinary := filepath.Join(bin, cluster.MetricsServerBinary)
	if _, err := os.Stat(msBinary); err != nil {
		t.Fatalf("metrics-server binary missing: %v; run `make tools` (or set GMS_BIN_DIR)", err)
	}

	c, err := cluster.Start(ctx, cluster.Options{BinDir: bin, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process logs:\n%s", c.LogTails(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	ctx, cancelTest := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelTest()

	const ns, name = "kube-system", "metrics-server"
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	port := ports[0]
	createMetricsServerObjects(ctx, t, c, ns, name, port)

	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := c.IssueServingCert(name, "127.0.0.1", "localhost", name+"."+ns+".svc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartProcess(name, msBinary,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+certFile,
		"--tls-private-key-file="+keyFile,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-use-node-status-port",
		"--kubelet-insecure-tls",
	); err != nil {
		t.Fatal(err)
	}

	if err := c.WaitForAPIServiceAvailable(ctx, "v1beta1.metrics.k8s.io"); err != nil {
		t.Fatal(err)
	}
	out, _, err := c.Kubectl(ctx, "get", "--raw", "/apis/metrics.k8s.io/v1beta1")
	if err != nil {
		t.Fatal(err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("parse discovery %q: %v", out, err)
	}
	if list.GroupVersion != "metrics.k8s.io/v1beta1" || len(list.APIResources) == 0 {
		t.Errorf("discovery through the aggregator = %+v", list)
	}
}

// createMetricsServerObjects creates what metrics-server needs in the
// cluster: its ServiceAccount and RBAC, an ExternalName Service pointing at
// localhost:port, and the APIService with the cluster CA as caBundle.
func createMetricsServerObjects(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, port int) {
	t.Helper()
	client := c.Client()
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}
	create := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	opts := metav1.CreateOptions{}
	_, err := client.CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, opts)
	create("service account", err)
	_, err = client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test:" + name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		},
	}, opts)
	create("cluster role", err)
	for _, role := range []string{"test:" + name, "system:auth-delegator"} {
		_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "test:" + name + ":" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   subject,
		}, opts)
		create("cluster role binding for "+role, err)
	}
	_, err = client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test:" + name + ":auth-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   subject,
	}, opts)
	create("role binding", err)
	_, err = client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port)}},
		},
	}, opts)
	create("service", err)

	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": "v1beta1.metrics.k8s.io"},
		"spec": map[string]any{
			"group":                "metrics.k8s.io",
			"version":              "v1beta1",
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
			"caBundle":             base64.StdEncoding.EncodeToString(c.CACertPEM()),
			"service":              map[string]any{"namespace": ns, "name": name, "port": int64(port)},
		},
	}}
	gvr := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	_, err = dyn.Resource(gvr).Create(ctx, apiService, opts)
	create("APIService", err)
}
