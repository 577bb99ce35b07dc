//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

// waitListed waits until discovery of custom.metrics.k8s.io lists every
// configured metric on pods and on leaderworkersets.
func (e *inferenceEnv) waitListed(ctx context.Context, t *testing.T, metrics []promscrape.Metric) {
	t.Helper()
	must(t, e.poll(ctx, e.bounds.up, "custom.metrics.k8s.io to list the pod-endpoint metrics", func(ctx context.Context) error {
		var list metav1.APIResourceList
		if err := suite.cluster.Client().Discovery().RESTClient().Get().AbsPath("/apis/custom.metrics.k8s.io/v1beta2").Do(ctx).Into(&list); err != nil {
			return err
		}
		for _, m := range metrics {
			for _, gr := range []string{"pods", "leaderworkersets.leaderworkerset.x-k8s.io"} {
				if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == gr+"/"+m.Name }) {
					return fmt.Errorf("%s/%s not listed among %d resources", gr, m.Name, len(list.APIResources))
				}
			}
		}
		return nil
	}))
}

// waitGroupSeries waits until the server's /metrics (--group-metrics-series)
// has group 0's value of metric.
func (e *inferenceEnv) waitGroupSeries(ctx context.Context, t *testing.T, ns, lwsName, metric string, want float64) {
	t.Helper()
	must(t, e.poll(ctx, e.bounds.up, "the group series of "+metric, metricCheck(e.server, valueIs(want), "group_metrics_server_lws_group_endpoint_value",
		`namespace="`+ns+`"`, `leaderworkerset="`+lwsName+`"`, `group="0"`, `metric="`+metric+`"`)))
}

func (e *inferenceEnv) scrapeAnnotations() map[string]string {
	return map[string]string{promscrape.AnnotationScrape: "true", promscrape.AnnotationPort: strconv.Itoa(e.port)}
}

// scaleOnLoad waits for the HPA to read its metric, puts load on, waits
// until the LWS wants the HPA's maximum and every group's pods run, then
// takes it off and waits for the minimum, logging the times.
func (e *inferenceEnv) scaleOnLoad(ctx context.Context, t *testing.T, ns string, hpa *autoscalingv2.HorizontalPodAutoscaler, load func(on bool)) {
	t.Helper()
	name, maxGroups, minGroups := hpa.Spec.ScaleTargetRef.Name, hpa.Spec.MaxReplicas, *hpa.Spec.MinReplicas
	e.waitReading(ctx, t, ns, hpa.Name, -1, e.bounds.read)
	b := e.bounds
	began := time.Now()
	load(true)
	// One HPA step per group when each step needs the new group's value:
	// up to maxGroups - minGroups steps, each bounded as one scale-up and
	// the new group's pods starting.
	steps := time.Duration(maxGroups - minGroups)
	up := e.waitScale(ctx, t, ns, name, hpa.Name, maxGroups, steps*b.running)
	_, err := e.waitPods(ctx, ns, name, int(maxGroups)*inferenceGroupSize, b.running)
	must(t, err)
	t.Logf("load on -> %d groups wanted in %v (bound %v), their %d pods Running %v after the load started", maxGroups, up.Round(time.Millisecond),
		steps*b.running, int(maxGroups)*inferenceGroupSize, since(began))

	began = time.Now()
	load(false)
	down := e.waitScale(ctx, t, ns, name, hpa.Name, minGroups, b.down)
	_, err = e.waitPods(ctx, ns, name, int(minGroups)*inferenceGroupSize, b.running)
	must(t, err)
	t.Logf("load off -> %d group wanted in %v (bound %v, patched scale-down window %v), extra groups gone %v after",
		minGroups, down.Round(time.Millisecond), b.down, testScaleDownWindow, since(began))
}

// createInferenceLWS creates a LeaderWorkerSet of one group of
// inferenceGroupSize pods, with annotations on its leader template only (as
// the LWS project's multi-node examples serve /metrics from the leader
// alone), and waits until its pods run.
func (e *inferenceEnv) createInferenceLWS(ctx context.Context, t *testing.T, ns, name string, annotations map[string]string) {
	t.Helper()
	e.createGroup(ctx, t, lws.NewLeaderWorkerSet(ns, name, 1, inferenceGroupSize, lwsCPURequest, annotations), inferenceGroupSize)
}

// leaderOnlyEndpoints serves render as the endpoint of every leader of ns
// on e.port. A worker serves nothing (500): the returned count is how often
// the server asked one, which must stay 0, since only the leader template
// opts in.
func (e *inferenceEnv) leaderOnlyEndpoints(t *testing.T, ns string, render func(*corev1.Pod) (string, bool)) *atomic.Int64 {
	t.Helper()
	var workers atomic.Int64
	startPodEndpoints(t, e.port, func(p *corev1.Pod) (string, bool) {
		if p.Labels[group.LabelWorkerIndex] != "0" {
			workers.Add(1)
			return "", false
		}
		return render(p)
	}, []string{ns})
	return &workers
}

// waitWorkersAbsent waits until every worker of leader's group answers
// NotFound for metric: a worker out of the metric's scope is not read.
func (e *inferenceEnv) waitWorkersAbsent(ctx context.Context, t *testing.T, leader types.NamespacedName, metric string) {
	t.Helper()
	for i := 1; i < inferenceGroupSize; i++ {
		e.waitAbsent(ctx, t, podPath(types.NamespacedName{Namespace: leader.Namespace, Name: fmt.Sprintf("%s-%d", leader.Name, i)}, metric, ""))
	}
}

// createExporterPods runs a fake DCGM exporter's pod, labelled as the
// shipped file selects it, on every fleet node in ns, as the exporter's
// DaemonSet would, and waits until they run.
func (e *inferenceEnv) createExporterPods(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	var pods []*corev1.Pod
	for _, node := range suite.fleet.NodeNames {
		pods = append(pods, kwokPod(ns, "dcgm-exporter-"+node, node, map[string]string{"app.kubernetes.io/name": "dcgm-exporter"},
			corev1.Container{Name: "exporter", Image: "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"}))
	}
	createPods(ctx, t, e.bounds.running, e.watch, pods...)
}

// testScaleDownWindow replaces the documented 600 s so that the
// scale-down is measured in seconds; the suite's controller manager has
// the same default.
const testScaleDownWindow = 5 * time.Second

// applyHPA creates the documented HPA in ns with a short scale-down window
// and policy.
func (e *inferenceEnv) applyHPA(ctx context.Context, t *testing.T, ns string, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	t.Helper()
	h := hpa.DeepCopy()
	h.Namespace = ns
	h.Spec.Behavior.ScaleDown = &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptr.To(int32(testScaleDownWindow.Seconds())),
		Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}},
	}
	must(t, createHPA(ctx, h))
}

// podPath, lwsPath and customPath are custom.metrics.k8s.io paths.
func podPath(pod types.NamespacedName, metric, metricSelector string) string {
	return customPath(fmt.Sprintf("namespaces/%s/pods/%s/%s", pod.Namespace, pod.Name, metric), metricSelector)
}

func lwsPath(ns, name, metric, metricSelector string) string {
	return customPath(fmt.Sprintf("namespaces/%s/leaderworkersets.leaderworkerset.x-k8s.io/%s/%s", ns, name, metric), metricSelector)
}

func customPath(rest, metricSelector string) string {
	p := "/apis/custom.metrics.k8s.io/v1beta2/" + rest
	if metricSelector != "" {
		p += "?metricLabelSelector=" + url.QueryEscape(metricSelector)
	}
	return p
}

// waitRaw waits until path serves exactly one value, wantMilli.
func (e *lwsEnv) waitRaw(ctx context.Context, t *testing.T, path string, wantMilli int64) {
	t.Helper()
	must(t, e.poll(ctx, e.bounds.up, fmt.Sprintf("%s to serve %dm", path, wantMilli), func(ctx context.Context) error {
		items, err := customItems(ctx, path)
		if err == nil && (len(items) != 1 || items[0].Value.MilliValue() != wantMilli) {
			err = fmt.Errorf("values %v", items)
		}
		return err
	}))
}

// waitAbsent waits until path answers NotFound (a metricLabelSelector that
// matches no series).
func (e *lwsEnv) waitAbsent(ctx context.Context, t *testing.T, path string) {
	t.Helper()
	must(t, e.poll(ctx, e.bounds.up, path+" to be NotFound", func(ctx context.Context) error { return absent(ctx, path) }))
}

// docHPAs are the HorizontalPodAutoscalers of the page's yaml blocks, by
// name; the test fails unless there are the four the page promises.
func docHPAs(t *testing.T, path string) map[string]*autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	out := map[string]*autoscalingv2.HorizontalPodAutoscaler{}
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(readFile(t, path)), -1) {
		if !strings.Contains(m[1], "kind: HorizontalPodAutoscaler") {
			continue
		}
		var h autoscalingv2.HorizontalPodAutoscaler
		if err := yaml.UnmarshalStrict([]byte(m[1]), &h); err != nil {
			t.Fatalf("an HPA of %s: %v", path, err)
		}
		if h.Spec.ScaleTargetRef.Kind != "LeaderWorkerSet" || len(h.Spec.Metrics) == 0 || h.Spec.MinReplicas == nil || h.Spec.Behavior == nil {
			t.Fatalf("HPA %s of %s: want metrics on a LeaderWorkerSet, minReplicas and behavior", h.Name, path)
		}
		out[h.Name] = &h
	}
	for _, name := range []string{"vllm", "sglang", "vllm-gpu", "vllm-zero"} {
		if out[name] == nil {
			t.Fatalf("%s has no HPA %q (it has %d)", path, name, len(out))
		}
	}
	return out
}
