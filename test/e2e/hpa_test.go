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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// TestHPAScales checks that a CPU-utilization HPA scales a Deployment up when
// the fleet reports load and back down when it stops, within bounds derived
// from the server's resolution and the controller manager's HPA settings.
func TestHPAScales(t *testing.T) {
	ctx := begin(t, 4*time.Minute)
	const ns = "e2e-hpa"
	newNamespace(ctx, t, ns)
	spec := env.DeploymentSpec{Namespace: ns, Name: "load", Replicas: 1, CPURequest: "100m"}
	target := fakekubelet.UsageTarget{Namespace: ns, Selector: spec.Selector()}
	const minReplicas, maxReplicas = 1, 4
	// 40% of the request: below the target of 50%, so the HPA keeps one
	// replica.
	runDeployment(ctx, t, spec, fakekubelet.Usage{CPUNanoCores: 40e6, MemoryBytes: 32 << 20})
	began := time.Now()
	must(t, env.CreateCPUHPA(ctx, suite.cluster.Client(), ns, spec.Name, minReplicas, maxReplicas, 50))
	must(t, waitHPA(ctx, ns, spec.Name, "read 40% utilization", func(hpa *autoscalingv2.HorizontalPodAutoscaler) bool {
		return utilization(hpa) == 40
	}))
	t.Logf("HPA read the utilization %v after it was created", since(began))

	b := newHPABounds()
	// 200% of the request: four replicas wanted, the maximum.
	suite.fleet.SetUsage(target, fakekubelet.Usage{CPUNanoCores: 200e6, MemoryBytes: 32 << 20})
	waitReplicas(ctx, t, ns, spec.Name, "scaled up", maxReplicas, b.up)
	_, err := env.WaitForRunningPods(ctx, suite.cluster.Client(), ns, spec.Selector(), maxReplicas)
	must(t, err)
	// 10% of the request: one replica wanted, after the downscale
	// stabilization window.
	suite.fleet.SetUsage(target, fakekubelet.Usage{CPUNanoCores: 10e6, MemoryBytes: 32 << 20})
	waitReplicas(ctx, t, ns, spec.Name, "scaled down", minReplicas, b.down)
}

// hpaSlack covers kube-controller-manager's own work, the workload
// controllers, kube-scheduler, kwok, and a loaded machine.
const hpaSlack = 20 * time.Second

// hpaBounds bound the waits of the HPA tests: until a new HPA reads its
// metric (read), and changes the replicas after a load change (up, down).
// The server's rate covers only the new load two scrapes after a change,
// each scrape taking up to the request timeout (staleBound), and the HPA
// acts on its next sync.
type hpaBounds struct{ read, up, down time.Duration }

func newHPABounds() hpaBounds {
	o := suite.opts
	return hpaBounds{
		read: staleBound() + 3*o.HPASyncPeriod + hpaSlack,
		up:   staleBound() + 3*o.HPASyncPeriod + o.HPACPUInitializationPeriod + hpaSlack,
		down: staleBound() + o.HPADownscaleStabilization + 3*o.HPASyncPeriod + hpaSlack,
	}
}

// newHPA is an HPA in ns named as its target, ref.
func newHPA(ns string, ref autoscalingv2.CrossVersionObjectReference, minReplicas, maxReplicas int32, metrics ...autoscalingv2.MetricSpec) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ns},
		Spec:       autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref, MinReplicas: ptr.To(minReplicas), MaxReplicas: maxReplicas, Metrics: metrics},
	}
}

func createHPA(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler) error {
	if _, err := suite.cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(hpa.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create HPA %s/%s: %w", hpa.Namespace, hpa.Name, err)
	}
	return nil
}

func getHPA(ctx context.Context, ns, name string) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	return suite.cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, name, metav1.GetOptions{})
}

func cpuUtilizationMetric(percent int32) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name:   corev1.ResourceCPU,
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &percent},
	}}
}

// waitHPA waits until ok holds for the HPA name in ns.
func waitHPA(ctx context.Context, ns, name, what string, ok func(*autoscalingv2.HorizontalPodAutoscaler) bool) error {
	return poll(ctx, "the HPA to "+what, func(ctx context.Context) error {
		hpa, err := getHPA(ctx, ns, name)
		if err == nil && !ok(hpa) {
			err = fmt.Errorf("utilization %d, memory %d, conditions %s", utilization(hpa), averageMemory(hpa), conditions(hpa))
		}
		return err
	})
}

// waitReplicas waits, for at most bound, until the Deployment's desired
// replicas are want, and logs how long that took after what.
func waitReplicas(ctx context.Context, t *testing.T, ns, name, what string, want int32, bound time.Duration) {
	t.Helper()
	began := time.Now()
	must(t, pollBounded(ctx, bound, fmt.Sprintf("deployment %s to want %d replicas", name, want), func(ctx context.Context) error {
		d, err := suite.cluster.Client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && (d.Spec.Replicas == nil || *d.Spec.Replicas != want) {
			hpa, _ := getHPA(ctx, ns, name)
			err = fmt.Errorf("replicas %v, HPA utilization %d", *d.Spec.Replicas, utilization(hpa))
		}
		return err
	}))
	t.Logf("%s: %d replicas wanted in %v (bound %v)", what, want, since(began), bound)
}

func utilization(hpa *autoscalingv2.HorizontalPodAutoscaler) int32 {
	if hpa == nil {
		return -1
	}
	for _, m := range hpa.Status.CurrentMetrics {
		if m.Resource != nil && m.Resource.Current.AverageUtilization != nil {
			return *m.Resource.Current.AverageUtilization
		}
	}
	return -1
}

func averageMemory(hpa *autoscalingv2.HorizontalPodAutoscaler) int64 {
	for _, m := range hpa.Status.CurrentMetrics {
		if m.Resource != nil && m.Resource.Name == corev1.ResourceMemory && m.Resource.Current.AverageValue != nil {
			return m.Resource.Current.AverageValue.Value()
		}
	}
	return -1
}

// hpaReading returns the HPA's last reading of its metric: a percentage for
// a resource utilization, milli-units for an object value or a pods average.
func hpaReading(hpa *autoscalingv2.HorizontalPodAutoscaler) (int64, bool) {
	for _, m := range hpa.Status.CurrentMetrics {
		switch {
		case m.Resource != nil && m.Resource.Current.AverageUtilization != nil:
			return int64(*m.Resource.Current.AverageUtilization), true
		case m.Object != nil && m.Object.Current.Value != nil:
			return m.Object.Current.Value.MilliValue(), true
		case m.Pods != nil && m.Pods.Current.AverageValue != nil:
			return m.Pods.Current.AverageValue.MilliValue(), true
		}
	}
	return 0, false
}

// scalingActive reports whether the HPA's ScalingActive condition is True:
// it could read its metrics at its last sync.
func scalingActive(hpa *autoscalingv2.HorizontalPodAutoscaler) bool {
	return hasCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionTrue)
}

// conditions prints the HPA's conditions, type=status (reason).
func conditions(hpa *autoscalingv2.HorizontalPodAutoscaler) string {
	var out []string
	for _, c := range hpa.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ")
}

// hpaState is what kubectl get hpa shows of the HPA name in ns (each
// metric's reading against its target, and the replicas) and its
// conditions.
func hpaState(ctx context.Context, ns, name string) string {
	hpa, err := getHPA(ctx, ns, name)
	if err != nil {
		return err.Error()
	}
	var readings []string
	for i, m := range hpa.Status.CurrentMetrics {
		if i >= len(hpa.Spec.Metrics) {
			break
		}
		switch spec := hpa.Spec.Metrics[i]; {
		case m.Resource != nil && spec.Resource != nil:
			readings = append(readings, metricReading(string(m.Resource.Name), m.Resource.Current, spec.Resource.Target))
		case m.Object != nil && spec.Object != nil:
			readings = append(readings, metricReading(m.Object.Metric.Name, m.Object.Current, spec.Object.Target))
		case m.Pods != nil && spec.Pods != nil:
			readings = append(readings, metricReading(m.Pods.Metric.Name, m.Pods.Current, spec.Pods.Target))
		}
	}
	return fmt.Sprintf("HPA %s: %s, replicas %d, desired %d; conditions %s",
		name, strings.Join(readings, ", "), hpa.Status.CurrentReplicas, hpa.Status.DesiredReplicas, conditions(hpa))
}

// metricReading is one metric's reading against its target as kubectl get
// hpa prints it: a utilization in percent, a value or an average value as a
// quantity, <unknown> before the HPA has read it.
func metricReading(name string, got autoscalingv2.MetricValueStatus, target autoscalingv2.MetricTarget) string {
	read, want := "<unknown>", "<none>"
	switch {
	case target.AverageUtilization != nil:
		if want = fmt.Sprintf("%d%%", *target.AverageUtilization); got.AverageUtilization != nil {
			read = fmt.Sprintf("%d%%", *got.AverageUtilization)
		}
	case target.Value != nil:
		if want = target.Value.String(); got.Value != nil {
			read = got.Value.String()
		}
	case target.AverageValue != nil:
		if want = target.AverageValue.String(); got.AverageValue != nil {
			read = got.AverageValue.String()
		}
	}
	return fmt.Sprintf("%s %s/%s", name, read, want)
}
