//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// topRow is a pod's expected kubectl top row: memory exactly, CPU within
// 5% (ukpd's rates follow the arrival of its answers).
type topRow struct {
	milliCPU int64
	memory   string
}

// waitTop waits, for at most bound, until kubectl top pod in ns shows
// exactly the pods of want, with the memory given and CPU within 5% (ukpd's
// rates follow the arrival of its responses, not the fake's clock).
func waitTop(ctx context.Context, t *testing.T, ns string, want topWant, bound time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var out string
	must(t, poll(ctx, "kubectl top pod -n "+ns, func(ctx context.Context) error {
		var err error
		if out, _, err = suite.cluster.Kubectl(ctx, "top", "pod", "-n", ns); err != nil {
			return err
		}
		if err := want.check(parseTable(out).byKey(1)); err != nil {
			return fmt.Errorf("%w:\n%s", err, out)
		}
		return nil
	}))
	t.Logf("kubectl top pod -n %s:\n%s", ns, out)
}

// waitTargets waits until the server's last tick had exactly one ukpd target,
// in state.
func waitTargets(ctx context.Context, t *testing.T, state string, bound time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	must(t, poll(ctx, "one "+state+" ukpd target", func(ctx context.Context) error {
		n, err := serverMetric(ctx, "group_metrics_server_scraper_targets", `source="ukpd"`, `state="`+state+`"`)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%v %s ukpd targets", n, state)
		}
		return nil
	}))
}

// serverMetric is ukpdMetric on the suite's server.
func serverMetric(ctx context.Context, name string, labels ...string) (float64, error) {
	client, err := suite.server.HTTPClient()
	if err != nil {
		return 0, err
	}
	return ukpdMetric(ctx, client, "https://"+suite.server.Address(), name, labels...)
}

// watchFreshness lists the metrics of pods every second until the returned
// function is called, which reports the oldest sample served for any of
// them and how many lists left one out.
func watchFreshness(ctx context.Context, t *testing.T, ns string, pods []corev1.Pod) func() (time.Duration, int) {
	t.Helper()
	metrics, err := newMetricsClient(suite.cluster.RESTConfig())
	must(t, err)
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		maxAge  time.Duration
		missing int
	)
	wg.Go(func() {
		every(ctx, time.Second, func() {
			list, err := metrics.MetricsV1beta1().PodMetricses(ns).List(ctx, metav1.ListOptions{})
			now := time.Now()
			if err == nil {
				seen := map[string]bool{}
				for _, m := range list.Items {
					seen[m.Name] = true
					for _, p := range pods {
						if p.Name == m.Name {
							maxAge = max(maxAge, now.Sub(m.Timestamp.Time))
						}
					}
				}
				for _, p := range pods {
					if !seen[p.Name] {
						missing++
					}
				}
			}
		})
	})
	return func() (time.Duration, int) {
		cancel()
		wg.Wait()
		return maxAge, missing
	}
}

// createUkpdHPA creates an HPA on the Deployment name with two metrics: an
// average CPU utilization of 50% and an average memory of 256Mi.
func createUkpdHPA(ctx context.Context, ns, name string, minReplicas, maxReplicas int32) error {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To(minReplicas),
			MaxReplicas:    maxReplicas,
			Metrics: []autoscalingv2.MetricSpec{
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
					Name:   corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)},
				}},
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
					Name:   corev1.ResourceMemory,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(resource.MustParse("256Mi"))},
				}},
			},
		},
	}
	_, err := suite.cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{})
	return err
}

// averageMemory returns the HPA's current average memory in bytes, or -1.
func averageMemory(hpa *autoscalingv2.HorizontalPodAutoscaler) int64 {
	for _, m := range hpa.Status.CurrentMetrics {
		if m.Resource != nil && m.Resource.Name == corev1.ResourceMemory && m.Resource.Current.AverageValue != nil {
			return m.Resource.Current.AverageValue.Value()
		}
	}
	return -1
}

// instancesIn counts the fake ukpd's running instances in namespace ns of
// pods whose names start with prefix.
func instancesIn(ns, prefix string) int {
	n := 0
	for _, in := range suite.ukpd.Instances() {
		if in.Namespace == ns && strings.HasPrefix(in.Pod, prefix) && in.State == fakeukpd.StateRunning {
			n++
		}
	}
	return n
}

// kraftletNode registers a kraftlet node named node, with no kubelet, whose
// Running pods get ukpd instances of the suite's fake ukpd at usage, and
// removes both when the test ends.
func kraftletNode(ctx context.Context, t *testing.T, node string, usage env.UkpdUsage) *env.InstanceSync {
	t.Helper()
	client := suite.cluster.Client()
	must(t, env.AddKraftletNode(ctx, suite.cluster, node))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete node %s: %v", node, err)
		}
	})
	syncCtx, stopSync := context.WithCancel(ctx)
	t.Cleanup(stopSync)
	instances, err := env.SyncInstances(syncCtx, client, node, suite.ukpd.Control, usage)
	must(t, err)
	return instances
}
