//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

// TestUkpdStandby runs a Deployment on a kraftlet node scaled to zero while
// idle, as kraftlet runs it by default.
func TestUkpdStandby(t *testing.T) {
	ctx := begin(t, 8*time.Minute)
	const (
		ns   = "e2e-ukpd-standby"
		node = "kraftlet-standby"
	)
	newNamespace(ctx, t, ns)
	client := suite.cluster.Client()
	o := suite.opts
	b := newHPABounds()

	instances := kraftletNode(ctx, t, node, env.UkpdUsage{CPU: "10m", Memory: "64Mi"})
	must(t, instances.SetStandby(ctx, ns, true))

	const minReplicas, maxReplicas = 2, 4
	uk := env.DeploymentSpec{Namespace: ns, Name: "idle", Replicas: minReplicas, CPURequest: "100m"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: uk.Name},
		Spec: corev1.ServiceSpec{
			Selector: uk.Labels(),
			Ports:    []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	_, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	must(t, err)
	pods := runKraftletDeployment(ctx, t, uk)
	running := time.Now()

	// In standby: zero CPU and the resident set ukpd reports, 0.
	want := topWant{}
	want.add(pods, topRow{milliCPU: 0, memory: "0Mi"})
	waitTop(ctx, t, suite.cluster, watched(), ns, want, staleBound()+hpaSlack)
	t.Logf("kubectl top shows every pod in standby at zero %v after they ran", since(running))

	must(t, createUkpdHPA(ctx, ns, uk.Name, minReplicas, maxReplicas))
	readCtx, cancel := context.WithTimeout(ctx, b.read)
	defer cancel()
	must(t, waitHPA(readCtx, ns, uk.Name, "read 0% CPU", func(hpa *autoscalingv2.HorizontalPodAutoscaler) bool { return utilization(hpa) == 0 }))
	// It stays: for a stabilization window and three syncs, nothing moves.
	stay := o.HPADownscaleStabilization + 3*o.HPASyncPeriod
	stayCtx, stayCancel := context.WithTimeout(ctx, stay)
	defer stayCancel()
	every(stayCtx, o.HPASyncPeriod, func() {
		d, err := client.AppsV1().Deployments(ns).Get(stayCtx, uk.Name, metav1.GetOptions{})
		if err == nil && *d.Spec.Replicas != minReplicas {
			t.Fatalf("replicas %d while every pod stood by, want %d", *d.Spec.Replicas, minReplicas)
		}
	})
	t.Logf("HPA read 0%% and kept %d replicas for %v", minReplicas, stay)

	// Woken under load: 200% of the request.
	must(t, instances.SetUsage(ctx, ns, env.UkpdUsage{CPU: "200m", Memory: "64Mi"}))
	must(t, instances.SetStandby(ctx, ns, false))
	waitReplicas(ctx, t, ns, uk.Name, "woken under load", maxReplicas, b.up)

	// Back in standby: down to the minimum within the HPA's windows.
	must(t, instances.SetStandby(ctx, ns, true))
	waitReplicas(ctx, t, ns, uk.Name, "back in standby", minReplicas, b.down)
	if err := instances.Err(); err != nil {
		t.Logf("instance sync had a failed call (retried on resync): %v", err)
	}
}
