//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// The kwok node's pod uses what its annotations say (kwok's
// usage-from-annotation): kwok adds usage × the time since its last answer
// to the counter at each answer and stamps no sample, so both servers take
// a sample at its arrival. kwokCPUTolerance covers the milliseconds between
// kwok's clock reading and the arrival, over windows of at least 5 s.
const (
	kwokCPU          = "250m"
	kwokMemory       = "64Mi"
	kwokCPUTolerance = 0.02
)

// TestKwokResourceMetrics: a node simulated by kwok v0.8.0's own metrics
// configuration, which serves its resource metrics at the path its
// metrics.k8s.io/resource-metrics-path annotation names (kwok's
// documentation), is read there by ours with --kubelet-endpoint=resource as
// by metrics-server v0.8.0: both report the usage kwok was told, node and
// pod. The suite's server, which reads the Summary, says once that it
// ignores the annotation.
func TestKwokResourceMetrics(t *testing.T) {
	ctx := begin(t, 3*time.Minute)
	const (
		ns   = "e2e-kwok"
		node = "kwok-metrics-0"
		pod  = "simulated"
	)
	ports, err := cluster.FreePorts(1)
	must(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	kwok, err := suite.cluster.StartResourceMetricsKwok(ctx, "kwok-metrics", "metrics", addr)
	if kwok != nil {
		t.Cleanup(func() { _ = kwok.Stop() })
	}
	must(t, err)

	client := suite.cluster.Client()
	n := cluster.NodeObject(node, nil, "127.0.0.1", ports[0])
	n.Annotations[cluster.KwokNodeAnnotation] = "metrics"
	n.Annotations[podcache.ResourceMetricsPathAnnotation] = "/metrics/nodes/" + node + "/metrics/resource"
	must(t, suite.cluster.CreateNode(ctx, n))
	cleanup(t, "delete node "+node, func(ctx context.Context) error {
		return client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	})
	newNamespace(ctx, t, ns)
	_, err = client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Annotations: map[string]string{"kwok.x-k8s.io/usage-cpu": kwokCPU, "kwok.x-k8s.io/usage-memory": kwokMemory}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = env.WaitForRunningPods(ctx, client, ns, labels.Everything(), 1)
	must(t, err)

	// Both trust the fleet's CA, which signs every other node's kubelet, and
	// the cluster CA, which signs kwok's.
	cas := filepath.Join(t.TempDir(), "kubelet-cas.pem")
	fleetCA, err := os.ReadFile(suite.fleet.CAFile)
	must(t, err)
	must(t, os.WriteFile(cas, append(fleetCA, suite.cluster.CACertPEM()...), 0o600))
	ours, oursCfg := startServerLike(t, suite.server, "gms-kwok", "--kubelet-endpoint=resource", "--kubelet-certificate-authority="+cas)
	ms, err := env.StartMetricsServer(ctx, suite.cluster, "metrics-server-kwok", suite.binDir, cas, max(10*time.Second, suite.resolution), suite.timeout)
	if ms != nil {
		t.Cleanup(func() { _ = ms.Process.Stop() })
	}
	must(t, err)

	cpu, memory := resource.MustParse(kwokCPU), resource.MustParse(kwokMemory)
	wantCPU, wantMemory := cpu.ScaledValue(-9), memory.Value()
	servers := map[string]metricsclient.Interface{}
	for name, cfg := range map[string]*rest.Config{"ours": oursCfg, "metrics-server": ms.RESTConfig()} {
		c, err := metricsclient.NewForConfig(cfg)
		must(t, err)
		servers[name] = c
	}
	read := map[string]map[string]usage{}
	must(t, boundedPoll(ctx, 90*time.Second, "both servers to read kwok's node and pod", append(watched(), ours, kwok, ms.Process), func(ctx context.Context) error {
		for name, c := range servers {
			pm, err := c.MetricsV1beta1().PodMetricses(ns).Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			nm, err := c.MetricsV1beta1().NodeMetricses().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			read[name] = map[string]usage{"pod": podUsage(*pm), "node": {cpuNano: nm.Usage.Cpu().ScaledValue(-9), memory: nm.Usage.Memory().Value(),
				start: nm.Timestamp.Add(-nm.Window.Duration), end: nm.Timestamp.Time}}
		}
		return nil
	}))
	checkMetricsServerSeries(ctx, t, ms)
	// The suite's server reads the Summary: it ignores the annotation, and
	// says so once.
	notices, err := linesWith(suite.server.Process.LogPath(), podcache.ResourceMetricsPathAnnotation)
	must(t, err)
	if len(notices) != 1 || !strings.Contains(notices[0], `node="`+node+`"`) || !strings.Contains(notices[0], `endpoint="summary"`) {
		t.Errorf("the suite's server logged %d lines naming the annotation, want one naming %s and the summary endpoint:\n%s", len(notices), node, strings.Join(notices, "\n"))
	}
	for name, r := range read {
		for what, u := range r {
			t.Logf("%s: %s: cpu %.3fm over %v, memory %d B (kwok was told %s, %s)", name, what, float64(u.cpuNano)/1e6, u.end.Sub(u.start), u.memory, kwokCPU, kwokMemory)
			if d := math.Abs(float64(u.cpuNano-wantCPU)) / float64(wantCPU); d > kwokCPUTolerance || u.memory != wantMemory {
				t.Errorf("%s: %s: cpu %dn, memory %d B; want %dn within %.0f%%, memory %d B", name, what, u.cpuNano, u.memory, wantCPU, 100*kwokCPUTolerance, wantMemory)
			}
		}
	}
}

// checkMetricsServerSeries checks that metrics-server, having scraped and
// served, has on its /metrics every series of its own that docs/migration.md
// maps to ours (the first column of its table; pkg/server checks ours).
func checkMetricsServerSeries(ctx context.Context, t *testing.T, ms *env.MetricsServer) {
	t.Helper()
	doc := readFile(t, repoPath(t, "docs", "migration.md"))
	names := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(metrics_server_[a-z_]+)").FindAllStringSubmatch(string(doc), -1) {
		names[m[1]] = true
	}
	if len(names) == 0 {
		t.Fatal("docs/migration.md maps none of metrics-server's series")
	}
	client, err := rest.HTTPClientFor(ms.RESTConfig())
	must(t, err)
	body, err := selfMetrics(ctx, endpoint{name: "metrics-server", base: ms.RESTConfig().Host, client: client})
	must(t, err)
	fams, err := promtext.Families(body)
	must(t, err)
	for name := range names {
		if len(fams[name].GetMetric()) == 0 {
			t.Errorf("docs/migration.md maps metrics-server's %s, which metrics-server v0.8.0 does not serve", name)
		}
	}
}
