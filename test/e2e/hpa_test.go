//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	client := suite.cluster.Client()
	spec := env.DeploymentSpec{Namespace: ns, Name: "load", Replicas: 1, CPURequest: "100m"}
	target := fakekubelet.UsageTarget{Namespace: ns, Selector: spec.Selector()}
	const (
		minReplicas, maxReplicas = 1, 4
		targetPercent            = 50
	)
	// 40% of the request: below the target, so the HPA keeps one replica.
	suite.fleet.SetUsage(target, fakekubelet.Usage{CPUNanoCores: 40e6, MemoryBytes: 32 << 20})
	must(t, env.CreateDeployment(ctx, client, spec))
	_, err := env.WaitForRunningPods(ctx, client, ns, spec.Selector(), 1)
	must(t, err)
	began := time.Now()
	must(t, env.CreateCPUHPA(ctx, client, ns, spec.Name, minReplicas, maxReplicas, targetPercent))
	must(t, waitHPA(ctx, ns, spec.Name, "read 40% utilization", func(hpa *autoscalingv2.HorizontalPodAutoscaler) bool {
		return utilization(hpa) == 40
	}))
	t.Logf("HPA read the utilization %v after it was created", time.Since(began).Round(time.Millisecond))

	o := suite.opts
	// The server's rate covers only the new load two scrapes after a change,
	// each scrape taking up to the request timeout; the HPA acts on its next
	// sync. The slack covers kube-controller-manager's own work, pod creation
	// by the Deployment and ReplicaSet controllers and kwok, and a loaded
	// machine.
	const slack = 20 * time.Second
	metricLag := 2*suite.resolution + suite.timeout
	upBound := metricLag + 3*o.HPASyncPeriod + o.HPACPUInitializationPeriod + slack
	downBound := metricLag + o.HPADownscaleStabilization + 3*o.HPASyncPeriod + slack

	// 200% of the request: four replicas wanted, the maximum.
	suite.fleet.SetUsage(target, fakekubelet.Usage{CPUNanoCores: 200e6, MemoryBytes: 32 << 20})
	up := waitReplicas(ctx, t, ns, spec.Name, maxReplicas, upBound)
	t.Logf("scaled up 1 -> %d in %v (bound %v)", maxReplicas, up.Round(time.Millisecond), upBound)
	_, err = env.WaitForRunningPods(ctx, client, ns, spec.Selector(), maxReplicas)
	must(t, err)

	// 10% of the request: one replica wanted, after the downscale
	// stabilization window.
	suite.fleet.SetUsage(target, fakekubelet.Usage{CPUNanoCores: 10e6, MemoryBytes: 32 << 20})
	down := waitReplicas(ctx, t, ns, spec.Name, minReplicas, downBound)
	t.Logf("scaled down %d -> %d in %v (bound %v)", maxReplicas, minReplicas, down.Round(time.Millisecond), downBound)
}

// waitReplicas waits, for at most bound, until the Deployment's desired
// replicas are want, and returns how long that took.
func waitReplicas(ctx context.Context, t *testing.T, ns, name string, want int32, bound time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	client := suite.cluster.Client()
	must(t, poll(ctx, fmt.Sprintf("deployment %s to want %d replicas", name, want), func(ctx context.Context) error {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != want {
			hpa, _ := client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, name, metav1.GetOptions{})
			return fmt.Errorf("replicas %v, HPA utilization %d", *d.Spec.Replicas, utilization(hpa))
		}
		return nil
	}))
	return time.Since(began)
}

// utilization returns the HPA's current average CPU utilization, or -1.
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
