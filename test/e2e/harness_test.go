//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

const (
	smokeNode = "e2e-smoke-node"
	// smokeTaint keeps every pod but this test's off the smoke node:
	// CreateDeployment's pods select every kwok node.
	smokeTaint = "e2e-smoke"
	// defaultKubeVersion is the release hack/tools.sh builds into bin/.
	defaultKubeVersion = "v1.37.2"
)

// TestClusterSmoke checks the control plane the suite runs on; the node it
// adds is removed again, so that no test that reads every node sees it.
func TestClusterSmoke(t *testing.T) {
	ctx := begin(t, 3*time.Minute)
	t.Run("stops with its context", stopsWithItsContext)

	// Setup's cluster.Start returned only once every component answered
	// its health check; cheaply, each still listens.
	for name, port := range suite.cluster.Ports() {
		if err := dialLoopback(port); err != nil {
			t.Errorf("%s port %d: %v", name, port, err)
		}
	}
	checkVersions(ctx, t)

	// Setup's fleet nodes came from AddNode: their kubelet endpoints and
	// addresses are the fleet's.
	client := suite.cluster.Client()
	for _, n := range suite.fleet.Nodes() {
		checkNodeEndpoint(ctx, t, client, n.Name(), n.Port())
	}

	const ns = "e2e-smoke"
	// Registered first, so that it runs after the namespace is deleted.
	t.Cleanup(func() { removeNode(t, smokeNode) })
	newNamespace(ctx, t, ns)
	ports, err := cluster.FreePorts(1)
	must(t, err)
	node := cluster.NodeObject(smokeNode, map[string]string{"pool": "smoke"}, "127.0.0.1", ports[0])
	node.Spec.Taints = []corev1.Taint{{Key: smokeTaint, Effect: corev1.TaintEffectNoSchedule}}
	must(t, suite.cluster.CreateNode(ctx, node))
	checkNodeEndpoint(ctx, t, client, smokeNode, ports[0])
	checkWorkloads(ctx, t, client, ns)
}

func dialLoopback(port int) error {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err == nil {
		_ = conn.Close()
	}
	return err
}

// checkVersions checks that kubectl and kube-apiserver both report the
// release the suite runs on.
func checkVersions(ctx context.Context, t *testing.T) {
	t.Helper()
	want := cmp.Or(suite.kubeVersion, defaultKubeVersion)
	out, _, err := suite.cluster.Kubectl(ctx, "version", "--output=json")
	must(t, err)
	var v struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("parse kubectl version output %q: %v", out, err)
	}
	if v.ClientVersion.GitVersion != want || v.ServerVersion.GitVersion != want {
		t.Errorf("kubectl version: client %q, server %q; want %s for both", v.ClientVersion.GitVersion, v.ServerVersion.GitVersion, want)
	}
}

// checkNodeEndpoint checks that the node's kubelet port is port and its
// InternalIP 127.0.0.1, as it was created: kwok's node stage keeps them.
func checkNodeEndpoint(ctx context.Context, t *testing.T, client kubernetes.Interface, name string, port int) {
	t.Helper()
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	if got := node.Status.DaemonEndpoints.KubeletEndpoint.Port; int(got) != port {
		t.Errorf("node %s: kubelet port = %d, want %d", name, got, port)
	}
	ip := ""
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
		}
	}
	if ip != "127.0.0.1" {
		t.Errorf("node %s: InternalIP = %q, want 127.0.0.1", name, ip)
	}
}

// checkWorkloads runs a pod bound to the smoke node and a Deployment of two
// replicas scheduled onto it (by its label, tolerating its taint), and
// checks that all three run there.
func checkWorkloads(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	bound := kwokPod(ns, "bound", smokeNode, map[string]string{"app": "bound"}, corev1.Container{Name: "c", Image: "fake"})
	_, err := client.CoreV1().Pods(ns).Create(ctx, bound, metav1.CreateOptions{})
	must(t, err)
	spec := env.DeploymentSpec{Namespace: ns, Name: "smoke", Replicas: 2, Containers: []string{"c"}, Image: "fake",
		NodeSelector: map[string]string{"pool": "smoke"},
		Toleration:   &corev1.Toleration{Key: smokeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	must(t, env.CreateDeployment(ctx, client, spec))
	must(t, poll(ctx, "pod bound to be Running", func(ctx context.Context) error {
		return podRunningOn(ctx, client, ns, "bound", smokeNode)
	}))
	must(t, poll(ctx, "deployment smoke to have 2 ready replicas", func(ctx context.Context) error {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, "smoke", metav1.GetOptions{})
		if err == nil && d.Status.ReadyReplicas != 2 {
			err = fmt.Errorf("%d ready replicas", d.Status.ReadyReplicas)
		}
		return err
	}))
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=smoke"})
	must(t, err)
	if len(pods.Items) != 2 {
		t.Fatalf("deployment has %d pods, want 2", len(pods.Items))
	}
	for _, p := range pods.Items {
		if err := podRunningOn(ctx, client, ns, p.Name, smokeNode); err != nil {
			t.Error(err)
		}
	}
}

func podRunningOn(ctx context.Context, client kubernetes.Interface, ns, name, nodeName string) error {
	p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err != nil:
		return err
	case p.Spec.NodeName != nodeName:
		return fmt.Errorf("pod %s is on node %q, want %q", name, p.Spec.NodeName, nodeName)
	case p.Status.Phase != corev1.PodRunning:
		return fmt.Errorf("pod %s is %s", name, p.Status.Phase)
	case p.Status.PodIP == "" || p.Status.HostIP != "127.0.0.1":
		return fmt.Errorf("pod %s has pod IP %q and host IP %q", name, p.Status.PodIP, p.Status.HostIP)
	}
	return nil
}

// removeNode waits until no pod is bound to the node, then deletes it and
// waits until it is gone, so that tests that read every node do not see it.
func removeNode(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := suite.cluster.Client()
	if err := poll(ctx, "the pods on node "+name+" to be gone", func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err == nil && len(pods.Items) > 0 {
			err = fmt.Errorf("%d pods, %s/%s first", len(pods.Items), pods.Items[0].Namespace, pods.Items[0].Name)
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("delete node %s: %v", name, err)
		return
	}
	if err := waitGone(ctx, "node "+name, func(ctx context.Context) error {
		_, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err
	}); err != nil {
		t.Error(err)
	}
}

// waitGone polls until get answers NotFound.
func waitGone(ctx context.Context, what string, get func(context.Context) error) error {
	return poll(ctx, what+" to be gone", func(ctx context.Context) error {
		if err := get(ctx); !apierrors.IsNotFound(err) {
			return cmp.Or(err, fmt.Errorf("%s still exists", what))
		}
		return nil
	})
}

// stopsWithItsContext starts a second control plane and cancels the context
// it was started with: every process exits and no port of it still accepts
// connections.
func stopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(suite.ctx)
	defer cancel()
	opts := suite.opts
	opts.WorkDir = t.TempDir()
	c, err := cluster.Start(ctx, opts)
	must(t, err)
	ports, procs := c.Ports(), c.Processes()
	cancel()
	select {
	case <-c.Stopped():
	case <-time.After(time.Minute):
		t.Fatalf("the cluster did not stop within a minute of its context being cancelled; logs:\n%s", c.LogTails(20))
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
		if dialLoopback(port) == nil {
			t.Errorf("%s port %d still accepts connections after Stop", name, port)
		}
	}
}

// TestControlPlaneRelease checks that the suite runs on the release it was
// asked for ($GMS_K8S_VERSION, or the one in bin/).
func TestControlPlaneRelease(t *testing.T) {
	ctx := begin(t, time.Minute)
	want := cmp.Or(suite.kubeVersion, defaultKubeVersion)
	checkVersions(ctx, t)
	kcm, err := exec.CommandContext(ctx, suite.cluster.BinaryPath(cluster.ControllerManagerBinary), "--version").Output()
	if err != nil {
		t.Fatalf("kube-controller-manager --version: %v", err)
	}
	if got := strings.TrimSpace(string(kcm)); got != "Kubernetes "+want {
		t.Errorf("kube-controller-manager --version = %q, want %q", got, "Kubernetes "+want)
	}
	for _, name := range suite.server.APIServices {
		if err := suite.cluster.WaitForAPIServiceAvailable(ctx, name); err != nil {
			t.Error(err)
		}
	}
	t.Logf("control plane %s: kubectl, kube-apiserver and kube-controller-manager report it, APIServices %v Available", want, suite.server.APIServices)
}

// kubectlMetricsVersion is the metrics.k8s.io version the suite's kubectl
// top asks for: kubectl's pkg/cmd/top/top.go lists supportedMetricsAPIVersions
// "v1", "v1beta1" from v1.37 and only "v1beta1" before (k8s.io/kubectl
// v0.35.4 and v0.36.3).
func kubectlMetricsVersion(t *testing.T) string {
	t.Helper()
	v := cmp.Or(suite.kubeVersion, defaultKubeVersion)
	var minor, patch int
	if _, err := fmt.Sscanf(v, "v1.%d.%d", &minor, &patch); err != nil {
		t.Fatalf("release %q: %v", v, err)
	}
	if minor < 37 {
		return "v1beta1"
	}
	return "v1"
}

// helpFlag matches a flag line of a cobra/pflag --help: "  -l, --node-selector string   ...".
var helpFlag = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: ([A-Za-z0-9=,.]+))?(?:\s{2,}|$)`)

// TestMetricsServerFlagList checks hack/metrics-server-v0.8.0-flags.txt
// against the flags metrics-server v0.8.0 itself lists.
func TestMetricsServerFlagList(t *testing.T) {
	ctx := begin(t, time.Minute)
	data := readFile(t, repoPath(t, "hack", "metrics-server-v0.8.0-flags.txt"))
	var listed, got []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(l, "#") {
			listed = append(listed, l)
		}
	}
	out, err := exec.CommandContext(ctx, filepath.Join(suite.binDir, cluster.MetricsServerBinary), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("metrics-server --help: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if m := helpFlag.FindStringSubmatch(line); m != nil {
			got = append(got, strings.TrimSpace(m[1]+" "+m[2]))
		}
	}
	sort.Strings(got)
	if diff := gocmp.Diff(listed, got); diff != "" {
		t.Errorf("hack/metrics-server-v0.8.0-flags.txt against metrics-server --help (-file +binary):\n%s", diff)
	}
}
