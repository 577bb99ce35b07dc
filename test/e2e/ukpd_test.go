//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// TestUkpdPods runs pods on a kraftlet node, their usage from the suite's fake
// ukpd, next to pods on the fleet's nodes.
func TestUkpdPods(t *testing.T) {
	ctx := begin(t, 8*time.Minute)
	const (
		ns   = "e2e-ukpd"
		node = "kraftlet-0"
	)
	newNamespace(ctx, t, ns)
	client := suite.cluster.Client()
	// metricLag is how long after a usage change the server's rates cover
	// only the new usage; slack covers the controllers, kwok and a loaded
	// machine, as in TestHPAScales.
	const slack = 20 * time.Second
	metricLag := 2*suite.resolution + suite.timeout
	metricsBound := metricLag + slack

	began := time.Now()
	instances := kraftletNode(ctx, t, node, env.UkpdUsage{CPU: "40m", Memory: "64Mi"})
	t.Logf("kraftlet node %s Ready and instance sync running after %v", node, time.Since(began).Round(time.Millisecond))

	web := env.DeploymentSpec{Namespace: ns, Name: "web", Replicas: 2, CPURequest: "100m"}
	webUsage := fakekubelet.Usage{CPUNanoCores: 150e6, MemoryBytes: 48 << 20}
	suite.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: ns, Selector: web.Selector()}, webUsage)
	uk := env.DeploymentSpec{Namespace: ns, Name: "uk", Replicas: 1, CPURequest: "100m"}
	must(t, env.CreateDeployment(ctx, client, web))
	must(t, env.CreateKraftletDeployment(ctx, client, uk))
	webPods, err := env.WaitForRunningPods(ctx, client, ns, web.Selector(), int(web.Replicas))
	must(t, err)
	ukPods, err := env.WaitForRunningPods(ctx, client, ns, uk.Selector(), int(uk.Replicas))
	must(t, err)
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
		want := map[string]topRow{}
		for _, p := range webPods {
			want[p.Name] = topRow{milliCPU: 150, memory: "48Mi"}
		}
		for _, p := range ukPods {
			want[p.Name] = topRow{milliCPU: 40, memory: "64Mi"}
		}
		waitTop(ctx, t, ns, want, metricsBound)
		t.Logf("kubectl top pod shows kubelet-backed and ukpd-backed pods %v after they ran", time.Since(running).Round(time.Millisecond))
	})

	t.Run("targets", func(t *testing.T) {
		waitTargets(ctx, t, "healthy", metricsBound)
		data, err := os.ReadFile(suite.server.Process.LogPath())
		must(t, err)
		if strings.Contains(string(data), `target="node/`+node+`"`) {
			t.Errorf("the server's log names target node/%s: the kubelet source should skip kraftlet nodes", node)
		}
	})

	fresh := watchFreshness(ctx, t, ns, webPods)

	t.Run("hpa", func(t *testing.T) {
		testUkpdHPA(ctx, t, instances, uk)
	})

	t.Run("endpoint-down", func(t *testing.T) {
		for _, fault := range []struct {
			name          string
			reason        string
			breakIt, heal func() error
		}{
			{"status-500", "http_status",
				func() error { return suite.ukpd.SetFault(fakeukpd.Fault{Kind: fakecore.FaultStatus500}) },
				func() error { suite.ukpd.ClearFault(""); return nil }},
			{"closed", "connection",
				func() error { return suite.ukpd.SetTransportFault(fakecore.FaultRefused) },
				func() error { return suite.ukpd.SetTransportFault("") }},
		} {
			t.Run(fault.name, func(t *testing.T) {
				testUkpdDown(ctx, t, ns, webPods, fault.reason, fault.breakIt, fault.heal)
			})
		}
	})

	maxAge, missing := fresh()
	t.Logf("kubelet-backed pods throughout: oldest sample served %v, missing from %d of the lists", maxAge.Round(time.Millisecond), missing)
	// Samples carry whole seconds; a second more covers that and the list's
	// own latency.
	if bound := metricLag + time.Second; missing > 0 || maxAge > bound {
		t.Errorf("kubelet-backed pods lost fresh metrics: oldest sample %v (bound %v), missing from %d lists", maxAge, bound, missing)
	}
	if err := instances.Err(); err != nil {
		t.Logf("instance sync had a failed call (retried on resync): %v", err)
	}
}

// testUkpdHPA scales a Deployment of unikernel pods with an HPA on CPU
// utilization and average memory, by the usage the fake ukpd reports.
func testUkpdHPA(ctx context.Context, t *testing.T, instances *env.InstanceSync, uk env.DeploymentSpec) {
	client := suite.cluster.Client()
	ns := uk.Namespace
	o := suite.opts
	const (
		slack                    = 20 * time.Second
		minReplicas, maxReplicas = 1, 4
	)
	metricLag := 2*suite.resolution + suite.timeout
	upBound := metricLag + 3*o.HPASyncPeriod + o.HPACPUInitializationPeriod + slack
	downBound := metricLag + o.HPADownscaleStabilization + 3*o.HPASyncPeriod + slack

	began := time.Now()
	must(t, createUkpdHPA(ctx, ns, uk.Name, minReplicas, maxReplicas))
	readCtx, cancel := context.WithTimeout(ctx, metricLag+3*o.HPASyncPeriod+slack)
	defer cancel()
	must(t, poll(readCtx, "the HPA to read 40% CPU and 64Mi", func(ctx context.Context) error {
		hpa, err := client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, uk.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		u, mem := utilization(hpa), averageMemory(hpa)
		if u < 38 || u > 42 || mem != 64<<20 {
			return fmt.Errorf("utilization %d%%, memory %d, conditions %v", u, mem, hpa.Status.Conditions)
		}
		return nil
	}))
	t.Logf("HPA read CPU utilization and memory from ukpd %v after it was created", time.Since(began).Round(time.Millisecond))

	// 200% of the request: four replicas wanted, the maximum.
	must(t, instances.SetUsage(ctx, ns, env.UkpdUsage{CPU: "200m"}))
	up := waitReplicas(ctx, t, ns, uk.Name, maxReplicas, upBound)
	t.Logf("scaled up %d -> %d in %v (bound %v)", minReplicas, maxReplicas, up.Round(time.Millisecond), upBound)
	_, err := env.WaitForRunningPods(ctx, client, ns, uk.Selector(), maxReplicas)
	must(t, err)
	must(t, poll(ctx, "an instance for each of the new pods", func(context.Context) error {
		if n := instancesIn(ns, uk.Name+"-"); n != maxReplicas {
			return fmt.Errorf("%d instances", n)
		}
		return nil
	}))

	// 10% of the request: one replica wanted after the stabilization window.
	must(t, instances.SetUsage(ctx, ns, env.UkpdUsage{CPU: "10m"}))
	down := waitReplicas(ctx, t, ns, uk.Name, minReplicas, downBound)
	t.Logf("scaled down %d -> %d in %v (bound %v)", maxReplicas, minReplicas, down.Round(time.Millisecond), downBound)
	must(t, poll(ctx, "the instances of removed pods to go", func(context.Context) error {
		if n := instancesIn(ns, uk.Name+"-"); n != minReplicas {
			return fmt.Errorf("%d instances", n)
		}
		return nil
	}))
}

// testUkpdDown breaks the ukpd endpoint, checks that the server counts the
// failure and stays ready while the kubelet-backed pods keep fresh samples,
// then heals it and waits for the target to be healthy again.
func testUkpdDown(ctx context.Context, t *testing.T, ns string, webPods []corev1.Pod, reason string, breakIt, heal func() error) {
	metricLag := 2*suite.resolution + suite.timeout
	bound := metricLag + 20*time.Second
	before, err := serverMetric(ctx, "group_metrics_server_scraper_target_failures_total", `source="ukpd"`, `reason="`+reason+`"`)
	must(t, err)
	must(t, breakIt())
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = heal()
		}
	})
	setAt := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	must(t, poll(waitCtx, "a "+reason+" failure of the ukpd target", func(ctx context.Context) error {
		n, err := serverMetric(ctx, "group_metrics_server_scraper_target_failures_total", `source="ukpd"`, `reason="`+reason+`"`)
		if err != nil {
			return err
		}
		if n <= before {
			return fmt.Errorf("%v failures", n)
		}
		return nil
	}))
	waitTargets(ctx, t, "failing", bound)
	t.Logf("ukpd target failing (%s) %v after the fault", reason, time.Since(setAt).Round(time.Millisecond))

	metrics, err := newMetricsClient(suite.cluster.RESTConfig())
	must(t, err)
	freshCtx, cancel2 := context.WithTimeout(ctx, bound)
	defer cancel2()
	must(t, poll(freshCtx, "samples newer than the fault for the kubelet-backed pods", func(ctx context.Context) error {
		for _, p := range webPods {
			m, err := metrics.MetricsV1beta1().PodMetricses(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !m.Timestamp.After(setAt) {
				return fmt.Errorf("pod %s: sample of %v", p.Name, m.Timestamp)
			}
		}
		return nil
	}))
	httpClient, err := suite.server.HTTPClient()
	must(t, err)
	code, body, err := env.Get(ctx, httpClient, "https://"+suite.server.Address()+"/readyz")
	if err != nil || code != http.StatusOK {
		t.Errorf("/readyz while ukpd is down: %d %v\n%s", code, err, body)
	}

	must(t, heal())
	healed = true
	healedAt := time.Now()
	waitTargets(ctx, t, "healthy", bound)
	t.Logf("ukpd target healthy again %v after the endpoint came back", time.Since(healedAt).Round(time.Millisecond))
}
