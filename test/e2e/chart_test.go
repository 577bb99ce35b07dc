//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/group-metrics-server/group-metrics-server/test/chart"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// topBound bounds the time from the server being Available to kubectl top
// showing its pods: a pod needs two samples, so two resolutions plus a
// scrape's timeout, and 20s for a loaded machine.
var topBound = 2*5*time.Second + 3*time.Second + 20*time.Second

// TestHelmChart installs manifests/charts/group-metrics-server with helm on a control
// plane of its own (a second server would take over the suite's APIServices).
func TestHelmChart(t *testing.T) {
	ctx := begin(t, 8*time.Minute)
	must(t, env.CheckBinaries(suite.binDir, chart.HelmBinary))
	c, fleet := ownCluster(ctx, t, 1)
	client := c.Client()
	const ns = "e2e-helm"
	must(t, env.CreateNamespace(ctx, client, ns))
	// The kraftlet node first: it is tainted only after it is created, so
	// pods pending then could land there.
	uni, ukpd, uniUsage := kraftletWorkload(ctx, t, c, ns)
	web := env.DeploymentSpec{Namespace: ns, Name: "web", Replicas: 2, CPURequest: "100m"}
	webUsage := fakekubelet.Usage{CPUNanoCores: 200e6, MemoryBytes: 64 << 20}
	fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns, Selector: web.Selector()}, webUsage)
	must(t, env.CreateDeployment(ctx, client, web))
	webPods, err := env.WaitForRunningPods(ctx, client, ns, web.Selector(), int(web.Replicas))
	must(t, err)
	uniPods, err := env.WaitForRunningPods(ctx, client, ns, uni.Selector(), int(uni.Replicas))
	must(t, err)

	ports, err := cluster.FreePorts(1)
	must(t, err)
	port := ports[0]
	h := chart.Helm{Binary: filepath.Join(suite.binDir, chart.HelmBinary), Home: t.TempDir(), Kubeconfig: c.KubeconfigPath()}
	dir := chart.Dir(repoPath(t))
	loopback := "service.type=ExternalName,service.externalName=localhost,service.port=" + strconv.Itoa(port)
	began := time.Now()
	_, err = h.Run(ctx, "install", chart.Name, dir, "--namespace", "kube-system", "--set", loopback)
	must(t, err)
	installed := releaseObjects(ctx, t, h)
	cfg := env.ServerConfig{BinDir: suite.binDir, KubeletCAFile: fleet.CAFile, MetricResolution: suite.resolution,
		KubeletRequestTimeout: suite.timeout, ProcessName: "gms-helm"}
	s, err := env.RunRelease(ctx, c, installed, port, cfg)
	if s != nil {
		t.Cleanup(func() { _ = s.Stop() })
	}
	must(t, err)
	t.Logf("helm install: %d objects, every APIService Available and verified %v later", len(installed), since(began))

	want := topWant{}
	for _, p := range webPods {
		want[p.Name] = topRow{milliCPU: int64(webUsage.CPUNanoCores / 1e6), memory: mebi(webUsage.MemoryBytes)}
	}
	waitTop(ctx, t, c, nil, ns, want, topBound)

	// Upgrade: the ukpd source, with its token and CA from a Secret.
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-ukpd-credentials", Namespace: "kube-system"},
		Data:       map[string][]byte{"token": readFile(t, ukpd.TokenFile), "ca.crt": readFile(t, ukpd.CAFile)},
	}
	_, err = client.CoreV1().Secrets("kube-system").Create(ctx, secret, metav1.CreateOptions{})
	must(t, err)
	endpoints, _ := json.Marshal([]string{ukpd.URL})
	if _, err := h.Run(ctx, "upgrade", chart.Name, dir, "--namespace", "kube-system", "--reuse-values",
		"--set-json", `sources=["kubelet","ukpd"]`, "--set-json", "ukpd.endpoints="+string(endpoints),
		"--set", "ukpd.existingSecret="+secret.Name+",ukpd.caKey=ca.crt"); err != nil {
		t.Fatal(err)
	}
	upgraded := releaseObjects(ctx, t, h)
	checkUpgraded(ctx, t, c, s, upgraded, ukpd.URL)
	if err := s.Stop(); err != nil {
		t.Logf("stop the server before the upgrade: %v", err)
	}
	cfg.ProcessName = "gms-helm-upgraded"
	s2, err := env.RunRelease(ctx, c, upgraded, port, cfg)
	if s2 != nil {
		t.Cleanup(func() { _ = s2.Stop() })
	}
	must(t, err)
	for _, p := range uniPods {
		want[p.Name] = uniUsage
	}
	waitTop(ctx, t, c, nil, ns, want, topBound)

	// Uninstall: the Deployments' pods go with them.
	uninstalled := time.Now()
	_, err = h.Run(ctx, "uninstall", chart.Name, "--namespace", "kube-system")
	must(t, err)
	if err := s2.Stop(); err != nil {
		t.Logf("stop the server after uninstall: %v", err)
	}
	checkUninstalled(ctx, t, c, append(installed, upgraded...))
	t.Logf("helm uninstall: nothing of the release left %v after it began", since(uninstalled))
}

// kraftletWorkload starts a fake ukpd of the test's own, a kraftlet node
// whose Running pods get instances there, and a Deployment of two pods on
// it; it returns them with the row kubectl top must show for each pod.
func kraftletWorkload(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) (env.DeploymentSpec, *env.Ukpd, topRow) {
	t.Helper()
	u, err := env.StartUkpd(filepath.Join(t.TempDir(), "ukpd"))
	must(t, err)
	t.Cleanup(func() { _ = u.Close() })
	const node = "kraftlet-helm"
	must(t, env.AddKraftletNode(ctx, c, node))
	syncCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	_, err = env.SyncInstances(syncCtx, c.Client(), node, u.Control, env.UkpdUsage{CPU: "40m", Memory: "64Mi"})
	must(t, err)
	spec := env.DeploymentSpec{Namespace: ns, Name: "unikernel", Replicas: 2, CPURequest: "100m"}
	must(t, env.CreateKraftletDeployment(ctx, c.Client(), spec))
	return spec, u, topRow{milliCPU: 40, memory: "64Mi"}
}

func releaseObjects(ctx context.Context, t *testing.T, h chart.Helm) []*unstructured.Unstructured {
	t.Helper()
	out, err := h.Run(ctx, "get", "manifest", chart.Name, "--namespace", "kube-system")
	must(t, err)
	objs, err := chart.Decode(strings.NewReader(out))
	must(t, err)
	return objs
}

// checkUpgraded: the live Deployment has the upgraded release's args, with
// the ukpd source, and the upgrade kept what the certificate controller
// wrote (the chart sets neither the caBundle nor the Secrets' data).
func checkUpgraded(ctx context.Context, t *testing.T, c *cluster.Cluster, s *env.Server, upgraded []*unstructured.Unstructured, ukpdURL string) {
	t.Helper()
	live, err := c.Client().AppsV1().Deployments("kube-system").Get(ctx, chart.Name, metav1.GetOptions{})
	must(t, err)
	args := live.Spec.Template.Spec.Containers[0].Args
	for _, a := range []string{"--sources=kubelet,ukpd", "--ukpd-endpoint=" + ukpdURL,
		"--ukpd-token-file=/var/run/ukpd-credentials/token", "--ukpd-certificate-authority=/var/run/ukpd-credentials/ca.crt"} {
		if !slices.Contains(args, a) {
			t.Errorf("after helm upgrade the Deployment's args %v lack %s", args, a)
		}
	}
	for _, o := range upgraded {
		if o.GetKind() == "Deployment" && o.GetName() == chart.Name {
			rendered, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			if got := rendered[0].(map[string]any)["args"]; fmt.Sprint(got) != fmt.Sprint(args) {
				t.Errorf("the release's manifest has args %v, the cluster %v", got, args)
			}
		}
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	must(t, err)
	for _, name := range s.APIServices {
		if b, _, _ := unstructured.NestedString(apiService(ctx, t, dyn, name).Object, "spec", "caBundle"); b == "" {
			t.Errorf("helm upgrade dropped the caBundle of %s", name)
		}
	}
	pair, err := c.Client().CoreV1().Secrets("kube-system").Get(ctx, chart.Name+"-serving-cert", metav1.GetOptions{})
	must(t, err)
	if len(pair.Data["tls.crt"]) == 0 || len(pair.Data["tls.key"]) == 0 {
		t.Errorf("helm upgrade emptied the serving Secret: keys %v", slices.Sorted(maps.Keys(pair.Data)))
	}
}

// checkUninstalled polls, within uninstallBound, until no object of objs
// is left, nor any object (pods and ReplicaSets too) labelled as ours or
// as the release's.
func checkUninstalled(ctx context.Context, t *testing.T, c *cluster.Cluster, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	must(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kubernetes.NewForConfigOrDie(c.RESTConfig()).Discovery()))
	err = boundedPoll(ctx, uninstallBound, "no object of the release left", nil, func(ctx context.Context) error {
		var left []string
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("%s: %w", chart.Key(o), err)
			}
			if _, err = dyn.Resource(m.Resource).Namespace(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{}); err == nil {
				left = append(left, chart.Key(o))
			} else if !apierrors.IsNotFound(err) {
				return err
			}
		}
		for _, sel := range []string{"app.kubernetes.io/instance=" + chart.Name, ourLabel, "app.kubernetes.io/name=group-metrics-server-cert-controller"} {
			l, err := labelled(ctx, dyn, sel, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"})
			if err != nil {
				return err
			}
			left = append(left, l...)
		}
		if len(left) > 0 {
			slices.Sort(left)
			return fmt.Errorf("left: %s", strings.Join(slices.Compact(left), ", "))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// topWant is the rows kubectl top pod must show, by pod.
type topWant map[string]topRow

func (want topWant) check(got map[string][]string) error {
	var diffs []string
	for name, row := range got {
		if _, ok := want[name]; !ok {
			diffs = append(diffs, "unexpected pod "+name)
		} else if len(row) < 3 {
			diffs = append(diffs, "short row for "+name)
		}
	}
	for name, w := range want {
		row, ok := got[name]
		if !ok || len(row) < 3 {
			diffs = append(diffs, "no row for "+name)
			continue
		}
		cpu, err := resource.ParseQuantity(row[1])
		if err != nil {
			return err
		}
		if d := cpu.MilliValue() - w.milliCPU; d*20 > w.milliCPU || -d*20 > w.milliCPU || row[2] != w.memory {
			diffs = append(diffs, fmt.Sprintf("%s: %s %s, want %dm %s", name, row[1], row[2], w.milliCPU, w.memory))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		return fmt.Errorf("%s", strings.Join(diffs, "; "))
	}
	return nil
}
