//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// TestUkpdPods runs pods on a kraftlet node, their usage from the suite's fake ukpd, next to pods on the
// fleet's nodes.
func TestUkpdPods(t *testing.T) {
	ctx := begin(t, 8*time.Minute)
	const (
		ns   = "e2e-ukpd"
		node = "kraftlet-0"
	)
	newNamespace(ctx, t, ns)
	metricsBound := staleBound() + hpaSlack

	began := time.Now()
	instances := kraftletNode(ctx, t, node, env.UkpdUsage{CPU: "40m", Memory: "64Mi"})
	t.Logf("kraftlet node %s Ready and instance sync running after %v", node, since(began))

	web := env.DeploymentSpec{Namespace: ns, Name: "web", Replicas: 2, CPURequest: "100m"}
	webPods, _ := runDeployment(ctx, t, web, fakekubelet.Usage{CPUNanoCores: 150e6, MemoryBytes: 48 << 20})
	uk := env.DeploymentSpec{Namespace: ns, Name: "uk", Replicas: 1, CPURequest: "100m"}
	ukPods := runKraftletDeployment(ctx, t, uk)
	for _, p := range webPods {
		if p.Spec.NodeName == node {
			t.Fatalf("pod %s of the fleet's Deployment landed on the kraftlet node", p.Name)
		}
	}
	for _, p := range ukPods {
		if p.Spec.NodeName != node {
			t.Fatalf("pod %s runs on %s, not on the kraftlet node", p.Name, p.Spec.NodeName)
		}
	}
	running := time.Now()

	t.Run("top", func(t *testing.T) {
		want := topWant{}
		want.add(webPods, topRow{milliCPU: 150, memory: "48Mi"})
		want.add(ukPods, topRow{milliCPU: 40, memory: "64Mi"})
		waitTop(ctx, t, suite.cluster, watched(), ns, want, metricsBound)
		t.Logf("kubectl top pod shows kubelet-backed and ukpd-backed pods %v after they ran", since(running))
	})

	t.Run("targets", func(t *testing.T) {
		waitTargets(ctx, t, "healthy", metricsBound)
		if strings.Contains(string(readFile(t, suite.server.Process.LogPath())), `target="node/`+node+`"`) {
			t.Errorf("the server's log names target node/%s: the kubelet source should skip kraftlet nodes", node)
		}
	})

	fresh := watchFreshness(ctx, t, ns, webPods)

	t.Run("hpa", func(t *testing.T) {
		testUkpdHPA(ctx, t, []*env.InstanceSync{instances}, func(ns, prefix string) int { return instancesIn(suite.ukpd.Instances(), ns, prefix) }, uk)
	})

	t.Run("endpoint-down", func(t *testing.T) {
		for _, f := range []struct {
			name, reason  string
			breakIt, heal func() error
		}{
			{"status-500", "http_status",
				func() error { return suite.ukpd.SetFault(fakeukpd.Fault{Kind: fakecore.FaultStatus500}) },
				func() error { suite.ukpd.ClearFault(""); return nil }},
			{"closed", "connection", func() error { return suite.ukpd.SetTransportFault(fakecore.FaultRefused) },
				func() error { return suite.ukpd.SetTransportFault("") }},
		} {
			t.Run(f.name, func(t *testing.T) { testUkpdDown(ctx, t, ns, webPods, f.reason, f.breakIt, f.heal) })
		}
	})

	maxAge, missing := fresh()
	t.Logf("kubelet-backed pods throughout: oldest sample served %v, missing from %d of the lists", maxAge.Round(time.Millisecond), missing)
	// Samples carry whole seconds; a second more covers that and the list's own latency.
	if bound := staleBound() + time.Second; missing > 0 || maxAge > bound {
		t.Errorf("kubelet-backed pods lost fresh metrics: oldest sample %v (bound %v), missing from %d lists", maxAge, bound, missing)
	}
	logSyncErr(t, instances)
}

// logSyncErr logs the last failed call of an instance sync, retried on resync.
func logSyncErr(t *testing.T, s *env.InstanceSync) {
	if err := s.Err(); err != nil {
		t.Logf("instance sync had a failed call (retried on resync): %v", err)
	}
}

// testUkpdHPA scales a Deployment of unikernel pods with an HPA on CPU utilization and average memory, by the
// usage the fake ukpds report: syncs set the usage of every host's instances, and running counts the running
// instances of a namespace's pods whose names start with a prefix.
func testUkpdHPA(ctx context.Context, t *testing.T, syncs []*env.InstanceSync, running func(ns, prefix string) int, uk env.DeploymentSpec) {
	ns := uk.Namespace
	b := newHPABounds()
	const minReplicas, maxReplicas = 1, 4
	began := time.Now()
	must(t, createUkpdHPA(ctx, ns, uk.Name, minReplicas, maxReplicas))
	readCtx, cancel := context.WithTimeout(ctx, b.read)
	defer cancel()
	must(t, waitHPA(readCtx, ns, uk.Name, "read 40% CPU and 64Mi", func(hpa *autoscalingv2.HorizontalPodAutoscaler) bool {
		u := utilization(hpa)
		return u >= 38 && u <= 42 && averageMemory(hpa) == 64<<20
	}))
	t.Logf("HPA read CPU utilization and memory from ukpd %v after it was created", since(began))

	setUsage := func(u env.UkpdUsage) {
		for _, s := range syncs {
			must(t, s.SetUsage(ctx, ns, u))
		}
	}
	// 200% of the request: four replicas wanted, the maximum.
	setUsage(env.UkpdUsage{CPU: "200m"})
	waitReplicas(ctx, t, ns, uk.Name, "scaled up", maxReplicas, b.up)
	_, err := env.WaitForRunningPods(ctx, suite.cluster.Client(), ns, uk.Selector(), maxReplicas)
	must(t, err)
	waitInstances(ctx, t, running, uk, maxReplicas)
	// 10% of the request: one replica wanted after the stabilization window.
	setUsage(env.UkpdUsage{CPU: "10m"})
	waitReplicas(ctx, t, ns, uk.Name, "scaled down", minReplicas, b.down)
	waitInstances(ctx, t, running, uk, minReplicas)
}

// waitInstances waits until the fake ukpds run n instances of uk's pods.
func waitInstances(ctx context.Context, t *testing.T, running func(ns, prefix string) int, uk env.DeploymentSpec, n int) {
	t.Helper()
	must(t, poll(ctx, fmt.Sprintf("%d instances of %s", n, uk.Name), func(context.Context) error {
		got := running(uk.Namespace, uk.Name+"-")
		return wantf(got == n, "%d instances", got)
	}))
}

// testUkpdDown breaks the ukpd endpoint, checks that the server counts the failure and stays ready while the
// kubelet-backed pods keep fresh samples, then heals it and waits for the target to be healthy again.
func testUkpdDown(ctx context.Context, t *testing.T, ns string, webPods []corev1.Pod, reason string, breakIt, heal func() error) {
	bound := staleBound() + hpaSlack
	failures := []string{"group_metrics_server_scraper_target_failures_total", `source="ukpd"`, `reason="` + reason + `"`}
	before := mustMetric(ctx, t, suite.server, failures[0], failures[1:]...)
	must(t, breakIt())
	heal = sync.OnceValue(heal)
	t.Cleanup(func() { _ = heal() })
	setAt := time.Now()
	must(t, pollBounded(ctx, bound, "a "+reason+" failure of the ukpd target", metricCheck(suite.server, valueAtLeast(before+1), failures[0], failures[1:]...)))
	waitTargets(ctx, t, "failing", bound)
	t.Logf("ukpd target failing (%s) %v after the fault", reason, since(setAt))

	must(t, pollBounded(ctx, bound, "samples newer than the fault for the kubelet-backed pods", func(ctx context.Context) error {
		served, err := listServed(ctx, ns)
		for _, p := range webPods {
			if s := served[p.Name]; err == nil && !s.at.After(setAt) {
				err = fmt.Errorf("pod %s: sample of %v", p.Name, s.at)
			}
		}
		return err
	}))
	httpClient, err := suite.server.HTTPClient()
	must(t, err)
	code, body, err := env.Get(ctx, httpClient, "https://"+suite.server.Address()+"/readyz")
	if err != nil || code != http.StatusOK {
		t.Errorf("/readyz while ukpd is down: %d %v\n%s", code, err, body)
	}

	must(t, heal())
	healedAt := time.Now()
	waitTargets(ctx, t, "healthy", bound)
	t.Logf("ukpd target healthy again %v after the endpoint came back", since(healedAt))
}

// TestUkpdPages runs pods on a kraftlet node of an account of 2,000 instances, on a ukpd that lists at most
// 100 a request.
func TestUkpdPages(t *testing.T) {
	ctx := begin(t, 6*time.Minute)
	const (
		ns      = "e2e-ukpd-pages"
		node    = "kraftlet-pages"
		ours    = 50
		foreign = 2000 - ours
	)
	newNamespace(ctx, t, ns)

	// Instances of pods this cluster does not have, created first: the oldest, listed first.
	var added []string
	t.Cleanup(func() {
		for _, id := range added {
			_ = suite.ukpd.Remove(id)
		}
	})
	for i := range foreign {
		in, err := suite.ukpd.AddInstance(fakeukpd.InstanceSpec{
			Namespace: "elsewhere", Pod: fmt.Sprintf("other-%04d", i), Container: "app", Node: "kraftlet", CPUCores: 0.01,
		})
		must(t, err)
		added = append(added, in.UUID)
	}

	kraftletNode(ctx, t, node, env.UkpdUsage{CPU: "40m", Memory: "64Mi"})
	uk := env.DeploymentSpec{Namespace: ns, Name: "paged", Replicas: ours, CPURequest: "100m"}
	pods := runKraftletDeployment(ctx, t, uk)
	// The sync creates each Running pod's instance from its informer, so the last ones may still be on their
	// way: wait for them, bounded.
	must(t, pollBounded(ctx, 30*time.Second, "the account to hold 2,000 instances", func(context.Context) error {
		n := len(suite.ukpd.Instances())
		return wantf(n >= 2000, "the account holds %d instances, want at least 2,000", n)
	}))
	running := time.Now()
	listsBefore := suite.ukpd.ListRequests()
	want := topWant{}
	want.add(pods, topRow{milliCPU: 40, memory: "64Mi"})
	waitTop(ctx, t, suite.cluster, watched(), ns, want, staleBound()+30*time.Second)
	t.Logf("kubectl top shows all %d pods, whose instances are the newest of %d over pages of %d, %v after they ran; %d list requests meanwhile",
		ours, len(suite.ukpd.Instances()), env.UkpdPageSize, since(running), suite.ukpd.ListRequests()-listsBefore)
}

// TestUkpdStandby runs a Deployment on a kraftlet node scaled to zero while idle, as kraftlet runs it by
// default.
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
	_, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: uk.Name},
		Spec: corev1.ServiceSpec{
			Selector: uk.Labels(), Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
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
	logSyncErr(t, instances)
}
