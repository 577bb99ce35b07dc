//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

// workerFull is a worker at 100% of its CPU request, as a worker loading
// model weights runs.
var workerFull = fakekubelet.Usage{CPUNanoCores: 100e6, MemoryBytes: 32 << 20}

// unreadyHold is how long workers at full CPU but not Ready must cause no
// scale-up.
const unreadyHold = 60 * time.Second

// TestLWSUnreadyWorkers checks that workers at 100% CPU that are not Ready cause
// no scale-up under the group policy, and that they do once Ready.
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
	must(t, e.createHPA(ctx, ns, cpuUtilizationMetric()))
	must(t, e.waitWorkerCPU(ctx, ns, workerFull.CPUNanoCores))
	held := time.Now()
	e.holdUnscaled(ctx, t, ns, unreadyHold, math.MaxInt64, "scaled up on workers that are not Ready")
	t.Logf("%d workers not Ready at 100%% CPU for %v: the LWS stayed at %d group; %s",
		len(workers), since(held), lwsMinGroups, e.hpaState(ctx, ns))

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
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
		must(t, err)
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
	deadline := time.Now().Add(d)
	ticker := time.NewTicker(cluster.PollInterval)
	defer ticker.Stop()
	var hpa *autoscalingv2.HorizontalPodAutoscaler
	for time.Now().Before(deadline) {
		scale, err := lws.GetScale(ctx, e.dyn, ns, lwsName)
		must(t, err)
		hpa, err = e.getHPA(ctx, ns, lwsName)
		must(t, err)
		if got, _ := hpaReading(hpa); scale.Spec.Replicas != lwsMinGroups || hpa.Status.DesiredReplicas > lwsMinGroups || got > maxReading {
			t.Fatalf("%s: replicas %d; %s", why, scale.Spec.Replicas, e.hpaState(ctx, ns))
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-ticker.C:
		}
	}
	return hpa
}
