//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// wantf is nil when ok holds, else the error format describes.
func wantf(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

// topRow is a pod's expected kubectl top row: memory exactly, CPU within 5% (ukpd's rates follow the arrival
// of its answers, not the fake's clock).
type topRow struct {
	milliCPU int64
	memory   string
}

// add wants row for every pod of pods.
func (want topWant) add(pods []corev1.Pod, row topRow) {
	for _, p := range pods {
		want[p.Name] = row
	}
}

// waitTop waits, for at most bound and while watch run, until kubectl top pod in ns on c shows exactly the
// pods of want.
func waitTop(ctx context.Context, t *testing.T, c *cluster.Cluster, watch []*cluster.Process, ns string, want topWant, bound time.Duration) {
	t.Helper()
	var out string
	err := boundedPoll(ctx, bound, "kubectl top pod -n "+ns, watch, func(ctx context.Context) error {
		attempt, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		stdout, stderr, err := c.Kubectl(attempt, "top", "pod", "-n", ns)
		if err != nil {
			return fmt.Errorf("%w: %s", err, stderr)
		}
		out = stdout
		return want.check(parseTable(out).byKey(1))
	})
	if err != nil {
		raw, stderr, rawErr := c.Kubectl(context.Background(), "get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/"+ns+"/pods")
		t.Fatalf("%v\nlast output:\n%s\nthe API: %v %s %s", err, out, rawErr, stderr, raw)
	}
	t.Logf("kubectl top pod -n %s through the aggregator:\n%s", ns, out)
}

// waitTargets waits until the server's last tick had exactly one ukpd target, in state.
func waitTargets(ctx context.Context, t *testing.T, state string, bound time.Duration) {
	t.Helper()
	must(t, pollBounded(ctx, bound, "one "+state+" ukpd target",
		metricCheck(suite.server, valueIs(1), "group_metrics_server_scraper_targets", `source="ukpd"`, `state="`+state+`"`)))
}

// metricOf sums the samples of a metric in s's /metrics whose labels contain every one of labels
// (`name="value"`); 0 when there is none.
func metricOf(ctx context.Context, s *env.Server, name string, labels ...string) (float64, error) {
	client, err := s.HTTPClient()
	if err != nil {
		return 0, err
	}
	defer client.CloseIdleConnections()
	body, err := selfMetrics(ctx, endpoint{base: "https://" + s.Address(), client: client})
	if err != nil {
		return 0, err
	}
	v, _, err := promtext.Value(body, name, labels...)
	return v, err
}

// mustMetric is metricOf for a test that cannot go on without the value.
func mustMetric(ctx context.Context, t *testing.T, s *env.Server, name string, labels ...string) float64 {
	t.Helper()
	v, err := metricOf(ctx, s, name, labels...)
	must(t, err)
	return v
}

// metricCheck is a poll check that s's /metrics has a sample of name with labels whose value ok accepts.
func metricCheck(s *env.Server, ok func(float64) error, name string, labels ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		v, err := metricOf(ctx, s, name, labels...)
		if err == nil {
			err = ok(v)
		}
		if err != nil {
			return fmt.Errorf("%s%v: %w", name, labels, err)
		}
		return nil
	}
}

func valueIs(want float64) func(float64) error {
	return func(v float64) error { return wantf(v == want, "value %v, want %v", v, want) }
}

func valueAtLeast(least float64) func(float64) error {
	return func(v float64) error { return wantf(v >= least, "value %v, want at least %v", v, least) }
}

// watchFreshness lists the metrics of pods every second until the returned function is called, which reports
// the oldest sample served for any of them and how many lists left one out.
func watchFreshness(ctx context.Context, t *testing.T, ns string, pods []corev1.Pod) func() (time.Duration, int) {
	t.Helper()
	metrics, err := metricsclient.NewForConfig(suite.cluster.RESTConfig())
	must(t, err)
	var maxAge time.Duration
	var missing int
	stop := background(ctx, time.Second, func(ctx context.Context) {
		list, err := metrics.MetricsV1beta1().PodMetricses(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		now := time.Now()
		served := map[string]time.Time{}
		for _, m := range list.Items {
			served[m.Name] = m.Timestamp.Time
		}
		for _, p := range pods {
			if at, ok := served[p.Name]; ok {
				maxAge = max(maxAge, now.Sub(at))
			} else {
				missing++
			}
		}
	})
	return func() (time.Duration, int) {
		stop()
		return maxAge, missing
	}
}

// createUkpdHPA creates an HPA on the Deployment name with two metrics: an average CPU utilization of 50% and
// an average memory of 256Mi.
func createUkpdHPA(ctx context.Context, ns, name string, minReplicas, maxReplicas int32) error {
	memory := autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name:   corev1.ResourceMemory,
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(resource.MustParse("256Mi"))},
	}}
	ref := autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name}
	return createHPA(ctx, newHPA(ns, ref, minReplicas, maxReplicas, cpuUtilizationMetric(50), memory))
}

// instancesIn counts the running instances of instances in namespace ns of pods whose names start with
// prefix.
func instancesIn(instances []fakeukpd.Instance, ns, prefix string) int {
	n := 0
	for _, in := range instances {
		n += btoi(in.Namespace == ns && strings.HasPrefix(in.Pod, prefix) && in.State == fakeukpd.StateRunning)
	}
	return n
}

// runKraftletDeployment creates spec's Deployment on the kraftlet nodes and waits until its pods run.
func runKraftletDeployment(ctx context.Context, t *testing.T, spec env.DeploymentSpec) []corev1.Pod {
	t.Helper()
	client := suite.cluster.Client()
	must(t, env.CreateKraftletDeployment(ctx, client, spec))
	pods, err := env.WaitForRunningPods(ctx, client, spec.Namespace, spec.Selector(), int(spec.Replicas))
	must(t, err)
	return pods
}

// kraftletNode registers a kraftlet node named node, with no kubelet, whose Running pods get ukpd instances
// of the suite's fake ukpd at usage, and removes both when the test ends.
func kraftletNode(ctx context.Context, t *testing.T, node string, usage env.UkpdUsage) *env.InstanceSync {
	t.Helper()
	addKraftletNode(ctx, t, node)
	return syncKraftletNode(ctx, t, node, suite.ukpd.Control, usage)
}

// syncKraftletNode syncs the instances of node's Running pods to the ukpd at control, at usage, until the
// test ends.
func syncKraftletNode(ctx context.Context, t *testing.T, node string, ukpd env.UkpdControl, u env.UkpdUsage) *env.InstanceSync {
	t.Helper()
	syncCtx, stopSync := context.WithCancel(ctx)
	t.Cleanup(stopSync)
	instances, err := env.SyncInstances(syncCtx, suite.cluster.Client(), node, ukpd, u)
	must(t, err)
	return instances
}
