//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

// TestLWSGroupAutoscaling runs an HPA on a LeaderWorkerSet's scale
// subresource, the load on the workers only, under each policy and the
// Object metric.
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
	must(t, e.createHPA(ctx, ns, cpuUtilizationMetric(lwsTargetPercent)))
	// Only the leader counts: 10m of its 100m.
	e.waitReading(ctx, t, ns, lwsName, 10, e.bounds.read)
	t.Logf("HPA read the leader's 10%% %v after it was created, while the workers ran at 200%%", since(began))

	// Below the target throughout, and still computing at the end.
	if hpa := e.holdUnscaled(ctx, t, ns, e.bounds.hold, lwsTargetPercent-1, "the pod policy scaled"); !scalingActive(hpa) {
		t.Fatalf("HPA not ScalingActive: %s", conditions(hpa))
	}
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
	must(t, e.createHPA(ctx, ns, cpuUtilizationMetric(lwsTargetPercent)))
	// (10m + 3 × 10m) / (4 × 100m).
	e.waitReading(ctx, t, ns, lwsName, 10, e.bounds.read)
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
	e.waitRaw(ctx, t, lwsPath(ns, lwsName, provider.MetricCPUUtilization, ""), 100)
	began := time.Now()
	must(t, e.createHPA(ctx, ns, objectUtilizationMetric(lwsName)))
	// The HPA discovers custom.metrics.k8s.io again every sync period.
	e.waitReading(ctx, t, ns, lwsName, 100, e.bounds.read+suite.opts.HPASyncPeriod)
	t.Logf("HPA read %s=100m %v after it was created", provider.MetricCPUUtilization, since(began))
	// 1.525 over the whole LWS: three groups wanted, the maximum.
	e.scaleUpAndDown(ctx, t, ns, "")
}

// testLWSExamples applies manifests/examples/lws-* each into a namespace of
// its own and waits until its HPA reads its metric.
func testLWSExamples(ctx context.Context, t *testing.T, e *lwsEnv) {
	for _, ex := range []struct{ dir, hpa, unit string }{
		{"lws-group-hpa", "web-group", "%"}, {"lws-custom-metrics-hpa", "web-custom", "m"},
	} {
		t.Run(ex.dir, func(t *testing.T) {
			ns := "e2e-" + ex.dir
			newNamespace(ctx, t, ns)
			dir := repoPath(t, "manifests", "examples", ex.dir)
			began := time.Now()
			out, _, err := suite.cluster.Kubectl(ctx, "apply", "-k", dir, "-n", ns)
			must(t, err)
			t.Logf("kubectl apply -k %s:\n%s", dir, out)
			reading := e.waitReading(ctx, t, ns, ex.hpa, -1, e.bounds.read+suite.opts.HPASyncPeriod)
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
	_, err := e.waitPods(ctx, ns, lwsName, lwsMaxGroups*lwsGroupSize, b.running-up)
	must(t, err)
	running := time.Since(began)
	t.Logf("load start -> %d groups wanted in %v (bound %v), their %d pods Running in %v (bound %v)",
		lwsMaxGroups, up.Round(time.Millisecond), b.up, lwsMaxGroups*lwsGroupSize, running.Round(time.Millisecond), b.running)
	must(t, e.waitGroupMetrics(ctx, ns, lwsMaxGroups, policy))
	t.Logf("every pod of the %d groups has metrics %v after the load started", lwsMaxGroups, since(began))

	began = time.Now()
	suite.fleet.SetUsage(workerTarget(ns), workerIdle)
	down := e.waitScale(ctx, t, ns, lwsName, lwsName, lwsMinGroups, b.down)
	_, err = e.waitPods(ctx, ns, lwsName, lwsMinGroups*lwsGroupSize, b.running)
	must(t, err)
	t.Logf("load stop -> %d group wanted in %v (bound %v, downscale stabilization %v), extra groups gone in %v",
		lwsMinGroups, down.Round(time.Millisecond), b.down, suite.opts.HPADownscaleStabilization, since(began))
}

// objectUtilizationMetric targets a group CPU utilization of 0.5 on the LWS
// name.
func objectUtilizationMetric(name string) autoscalingv2.MetricSpec {
	value := resource.MustParse(strconv.Itoa(lwsTargetPercent*10) + "m")
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
		DescribedObject: lwsRef(name),
		Metric:          autoscalingv2.MetricIdentifier{Name: provider.MetricCPUUtilization},
		Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: &value},
	}}
}

func lwsRef(name string) autoscalingv2.CrossVersionObjectReference {
	return autoscalingv2.CrossVersionObjectReference{
		APIVersion: lws.GroupVersionResource.GroupVersion().String(), Kind: "LeaderWorkerSet", Name: name,
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// workerFull is a worker at 100% of its CPU request, as a worker loading
// model weights runs; unreadyHold is how long such workers, not Ready, must
// cause no scale-up.
var workerFull = fakekubelet.Usage{CPUNanoCores: 100e6, MemoryBytes: 32 << 20}

const unreadyHold = 60 * time.Second

// TestLWSUnreadyWorkers checks that workers at 100% CPU that are not Ready
// cause no scale-up under the group policy, and that they do once Ready.
func TestLWSUnreadyWorkers(t *testing.T) {
	ctx := begin(t, 8*time.Minute)
	e := newLWSEnv(ctx, t)
	const ns = "e2e-lws-unready"
	newNamespace(ctx, t, ns)
	e.createLWS(ctx, t, ns, map[string]string{group.AnnotationPolicy: string(group.PolicyGroup)}, workerIdle)
	workers := e.setWorkersReady(ctx, t, ns, false)

	leader := lwsName + "-0"
	must(t, e.poll(ctx, e.bounds.read, "the leader to say why it has no value", func(ctx context.Context) error {
		_, err := e.metrics.MetricsV1beta1().PodMetricses(ns).Get(ctx, leader, metav1.GetOptions{})
		switch {
		case err == nil:
			return fmt.Errorf("get %s: a value, want NotFound", leader)
		case !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "is not ready as the HPA counts pods"):
			return fmt.Errorf("get %s: %w", leader, err)
		}
		t.Logf("leader's PodMetrics: %v", err)
		return nil
	}))

	suite.fleet.SetUsage(workerTarget(ns), workerFull)
	must(t, e.createHPA(ctx, ns, cpuUtilizationMetric(lwsTargetPercent)))
	must(t, e.waitWorkerCPU(ctx, ns, workerFull.CPUNanoCores))
	held := time.Now()
	e.holdUnscaled(ctx, t, ns, unreadyHold, math.MaxInt64, "scaled up on workers that are not Ready")
	t.Logf("%d workers not Ready at 100%% CPU for %v: the LWS stayed at %d group; %s",
		len(workers), since(held), lwsMinGroups, hpaState(ctx, ns, lwsName))

	e.setWorkersReady(ctx, t, ns, true)
	up := e.waitScale(ctx, t, ns, lwsName, lwsName, lwsMinGroups+1, e.bounds.up)
	t.Logf("workers Ready -> %d groups wanted in %v (bound %v: metric lag, 3 HPA syncs, CPU initialization period, slack)",
		lwsMinGroups+1, up.Round(time.Millisecond), e.bounds.up)
}

// setWorkersReady sets the Ready condition of every worker of the LWS in
// ns, through the status subresource as a kubelet does: not Ready since
// the pod started (never Ready), or Ready from now. It returns the
// workers' names.
func (e *lwsEnv) setWorkersReady(ctx context.Context, t *testing.T, ns string, ready bool) []string {
	t.Helper()
	client := suite.cluster.Client()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: workerTarget(ns).Selector.String()})
	must(t, err)
	if len(pods.Items) != lwsGroupSize-1 {
		t.Fatalf("%d workers, want %d", len(pods.Items), lwsGroupSize-1)
	}
	var names []string
	for _, p := range pods.Items {
		cond := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}
		if !ready {
			cond.Status, cond.Reason = corev1.ConditionFalse, "LoadingModel"
			if p.Status.StartTime != nil {
				cond.LastTransitionTime = *p.Status.StartTime
			}
		}
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
		if _, err := client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("set Ready=%v on %s: %v", ready, p.Name, err)
		}
		names = append(names, p.Name)
	}
	return names
}

// holdUnscaled fails the test, saying why, if during d the LWS in ns wants
// more than lwsMinGroups groups, or its HPA wants more or reads more than
// maxReading. It returns the HPA last read.
func (e *lwsEnv) holdUnscaled(ctx context.Context, t *testing.T, ns string, d time.Duration, maxReading int64, why string) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	holdCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var hpa *autoscalingv2.HorizontalPodAutoscaler
	every(holdCtx, cluster.PollInterval, func() {
		scale, err := lws.GetScale(ctx, e.dyn, ns, lwsName)
		must(t, err)
		hpa, err = getHPA(ctx, ns, lwsName)
		must(t, err)
		if got, _ := hpaReading(hpa); scale.Spec.Replicas != lwsMinGroups || hpa.Status.DesiredReplicas > lwsMinGroups || got > maxReading {
			t.Fatalf("%s: replicas %d; %s", why, scale.Spec.Replicas, hpaState(ctx, ns, lwsName))
		}
	})
	if err := ctx.Err(); err != nil {
		t.Fatal(err)
	}
	return hpa
}
