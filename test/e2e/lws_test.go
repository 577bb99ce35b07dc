//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

// TestLWSGroupAutoscaling runs an HPA on a LeaderWorkerSet's scale subresource, the
// load on the workers only, under each policy and the Object metric.
func TestLWSGroupAutoscaling(t *testing.T) {
	ctx := begin(t, 12*time.Minute)
	e := newLWSEnv(ctx, t)

	t.Run("pod policy keeps the minimum", func(t *testing.T) { testLWSPodPolicy(ctx, t, e) })
	t.Run("group policy scales", func(t *testing.T) { testLWSGroupPolicy(ctx, t, e) })

	custom := deployCustomMetricsServer(ctx, t, "group-metrics-server-custom-metrics")
	e.watch = append(e.watch, custom.Process)
	t.Run("object metric scales", func(t *testing.T) { testLWSObjectMetric(ctx, t, e) })
	t.Run("examples apply", func(t *testing.T) { testLWSExamples(ctx, t, e) })
}

// testLWSPodPolicy: without the annotation the server's default policy, pod,
// applies, and the leaders report their own 10%.
func testLWSPodPolicy(ctx context.Context, t *testing.T, e *lwsEnv) {
	const ns = "e2e-lws-pod"
	newNamespace(ctx, t, ns)
	e.createLWS(ctx, t, ns, nil, workerLoad)
	must(t, e.waitWorkerCPU(ctx, ns, workerLoad.CPUNanoCores))
	began := time.Now()
	must(t, e.createHPA(ctx, ns, cpuUtilizationMetric()))
	// Only the leader counts: 10m of its 100m.
	e.waitHPAReading(ctx, t, ns, 10, e.bounds.read)
	t.Logf("HPA read the leader's 10%% %v after it was created, while the workers ran at 200%%", since(began))

	e.holdMinimum(ctx, t, ns, e.bounds.hold)
	t.Logf("the LeaderWorkerSet stayed at %d group for %v (%d HPA sync periods after the metric lag)",
		lwsMinGroups, e.bounds.hold, holdSyncPeriods)
}

// testLWSGroupPolicy: with group-metrics-server.io/group-policy=group on the
// leader template each leader reports its group's utilization.
func testLWSGroupPolicy(ctx context.Context, t *testing.T, e *lwsEnv) {
	const ns = "e2e-lws-group"
	newNamespace(ctx, t, ns)
	annotations := map[string]string{group.AnnotationPolicy: string(group.PolicyGroup)}
	e.createLWS(ctx, t, ns, annotations, workerIdle)
	must(t, e.createHPA(ctx, ns, cpuUtilizationMetric()))
	// (10m + 3 × 10m) / (4 × 100m).
	e.waitHPAReading(ctx, t, ns, 10, e.bounds.read)
	must(t, e.waitGroupMetrics(ctx, ns, lwsMinGroups, string(group.PolicyGroup)))
	// (10m + 3 × 200m) / (4 × 100m) = 152.5% per group: three groups wanted,
	// the maximum.
	e.scaleUpAndDown(ctx, t, ns, string(group.PolicyGroup))
}

// testLWSObjectMetric: an Object metric on the LeaderWorkerSet from
// custom.metrics.k8s.io; the leaders keep the default pod policy.
func testLWSObjectMetric(ctx context.Context, t *testing.T, e *lwsEnv) {
	const ns = "e2e-lws-object"
	newNamespace(ctx, t, ns)
	e.createLWS(ctx, t, ns, nil, workerIdle)
	must(t, e.waitCustomMetric(ctx, ns, 100))
	began := time.Now()
	must(t, e.createHPA(ctx, ns, objectUtilizationMetric(lwsName)))
	// The HPA discovers custom.metrics.k8s.io again every sync period.
	e.waitHPAReading(ctx, t, ns, 100, e.bounds.read+suite.opts.HPASyncPeriod)
	t.Logf("HPA read %s=100m %v after it was created", provider.MetricCPUUtilization, since(began))
	// 1.525 over the whole LWS: three groups wanted, the maximum.
	e.scaleUpAndDown(ctx, t, ns, "")
}

// testLWSExamples applies manifests/examples/lws-* each into a namespace of
// its own and waits until its HPA reads its metric.
func testLWSExamples(ctx context.Context, t *testing.T, e *lwsEnv) {
	root, err := env.RepoRoot()
	must(t, err)
	for _, ex := range []struct{ dir, hpa, unit string }{
		{"lws-group-hpa", "web-group", "%"},
		{"lws-custom-metrics-hpa", "web-custom", "m"},
	} {
		t.Run(ex.dir, func(t *testing.T) {
			ns := "e2e-" + ex.dir
			newNamespace(ctx, t, ns)
			dir := filepath.Join(root, "manifests", "examples", ex.dir)
			began := time.Now()
			out, _, err := suite.cluster.Kubectl(ctx, "apply", "-k", dir, "-n", ns)
			must(t, err)
			t.Logf("kubectl apply -k %s:\n%s", dir, out)
			var reading int64
			must(t, e.poll(ctx, e.bounds.read+suite.opts.HPASyncPeriod, "HPA "+ex.hpa+" to read its metric", func(ctx context.Context) error {
				hpa, err := e.getHPA(ctx, ns, ex.hpa)
				if err != nil {
					return err
				}
				var ok bool
				if reading, ok = hpaReading(hpa); !ok {
					return fmt.Errorf("no metric read yet; conditions %s", conditions(hpa))
				}
				return nil
			}))
			t.Logf("HPA %s read %d%s %v after apply", ex.hpa, reading, ex.unit, since(began))
		})
	}
}

// scaleUpAndDown puts load on the workers of the LWS in ns, which runs one
// idle group, waits for the HPA to scale it to lwsMaxGroups and for the new
// groups' pods to run and have metrics, then stops the load and waits for the
// scale-down. policy is the leaders' expected reported policy, "" for pod.
func (e *lwsEnv) scaleUpAndDown(ctx context.Context, t *testing.T, ns, policy string) {
	t.Helper()
	b := e.bounds
	began := time.Now()
	suite.fleet.SetUsage(workerTarget(ns), workerLoad)
	up := e.waitScale(ctx, t, ns, lwsName, lwsName, lwsMaxGroups, b.up)
	_, err := e.waitPods(ctx, ns, lwsMaxGroups, b.running-up)
	must(t, err)
	running := time.Since(began)
	t.Logf("load start -> %d groups wanted in %v (bound %v), their %d pods Running in %v (bound %v)",
		lwsMaxGroups, up.Round(time.Millisecond), b.up, lwsMaxGroups*lwsGroupSize, running.Round(time.Millisecond), b.running)
	must(t, e.waitGroupMetrics(ctx, ns, lwsMaxGroups, policy))
	t.Logf("every pod of the %d groups has metrics %v after the load started", lwsMaxGroups, since(began))

	began = time.Now()
	suite.fleet.SetUsage(workerTarget(ns), workerIdle)
	down := e.waitScale(ctx, t, ns, lwsName, lwsName, lwsMinGroups, b.down)
	_, err = e.waitPods(ctx, ns, lwsMinGroups, b.running)
	must(t, err)
	t.Logf("load stop -> %d group wanted in %v (bound %v, downscale stabilization %v), extra groups gone in %v",
		lwsMinGroups, down.Round(time.Millisecond), b.down, suite.opts.HPADownscaleStabilization, since(began))
}

func cpuUtilizationMetric() autoscalingv2.MetricSpec {
	target := int32(lwsTargetPercent)
	return autoscalingv2.MetricSpec{
		Type: autoscalingv2.ResourceMetricSourceType,
		Resource: &autoscalingv2.ResourceMetricSource{
			Name:   "cpu",
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &target},
		},
	}
}

// objectUtilizationMetric targets a group CPU utilization of 0.5 on the LWS
// name.
func objectUtilizationMetric(name string) autoscalingv2.MetricSpec {
	value := resource.MustParse(strconv.Itoa(lwsTargetPercent*10) + "m")
	return autoscalingv2.MetricSpec{
		Type: autoscalingv2.ObjectMetricSourceType,
		Object: &autoscalingv2.ObjectMetricSource{
			DescribedObject: lwsRef(name),
			Metric:          autoscalingv2.MetricIdentifier{Name: provider.MetricCPUUtilization},
			Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: &value},
		},
	}
}

func lwsRef(name string) autoscalingv2.CrossVersionObjectReference {
	return autoscalingv2.CrossVersionObjectReference{
		APIVersion: lws.GroupVersionResource.GroupVersion().String(),
		Kind:       "LeaderWorkerSet",
		Name:       name,
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
