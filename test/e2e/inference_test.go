//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

const (
	inferenceGroupSize = 3
	// A label value, so that a metricLabelSelector can name it (a
	// Hugging Face name with a slash cannot be selected by equality).
	inferenceModel = "llama-3.1-70b-instruct"
	// dcgmNamespace holds the fake DCGM exporter's pod.
	dcgmNamespace = "e2e-inference-dcgm"
)

// TestInferenceAutoscaling runs the server of manifests/examples/inference-autoscaling
// against LeaderWorkerSets whose pods serve Prometheus endpoints.
func TestInferenceAutoscaling(t *testing.T) {
	ctx := begin(t, 15*time.Minute)
	e := newLWSEnv(ctx, t)
	root, err := env.RepoRoot()
	must(t, err)
	hpas := docHPAs(t, filepath.Join(root, "docs", "inference-autoscaling.md"))
	configFile := filepath.Join(root, "manifests", "components", "pod-metrics", "pod-metrics.yaml")
	data, err := os.ReadFile(configFile)
	must(t, err)
	cfg, errs := promscrape.Parse(data)
	if len(errs) > 0 || len(cfg.NodeExporters) != 1 {
		t.Fatalf("%s: %v (want one node exporter)", configFile, errs)
	}

	s := deployOwnServer(ctx, t, "group-metrics-server-inference", []string{"--pod-metrics-config=" + configFile, "--group-metrics-series"},
		filepath.Join(root, "manifests", "examples", "inference-autoscaling"))
	e.watch = append(e.watch, s.Process)

	ports, err := cluster.FreePorts(1)
	must(t, err)
	ie := &inferenceEnv{lwsEnv: e, server: s, metrics: cfg.Metrics, port: ports[0], exporterPort: cfg.NodeExporters[0].Port}

	t.Run("vLLM queue depth", func(t *testing.T) { testVLLMQueue(ctx, t, ie, hpas["vllm"]) })
	t.Run("GPU utilization", func(t *testing.T) { testGPUUtilization(ctx, t, ie, hpas["vllm-gpu"]) })
	t.Run("SGLang queue", func(t *testing.T) { testSGLangQueue(ctx, t, ie, hpas["sglang"]) })
}

type inferenceEnv struct {
	*lwsEnv
	server *env.Server
	// metrics are those of the shipped file.
	metrics []promscrape.Metric
	// port is the port the serving pods announce; exporterPort the DCGM
	// exporter's, from the shipped file.
	port, exporterPort int
}

// testVLLMQueue: each worker's queue grows to 10 while every leader's
// stays 0; the leaders report their groups' 20, the HPA wants
// ceil(20 / 5) = 4 groups, its maximum, in one step; drained, 1.
func testVLLMQueue(ctx context.Context, t *testing.T, e *inferenceEnv, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	const ns = "e2e-inference-vllm"
	newNamespace(ctx, t, ns)
	var (
		queue  atomic.Int64
		broken atomic.Pointer[string]
	)
	startPodEndpoints(t, e.port, func(p *corev1.Pod) (string, bool) {
		if b := broken.Load(); b != nil && *b == p.Name {
			return "", false
		}
		if p.Labels[group.LabelWorkerIndex] == "0" {
			return vllmText(inferenceModel, 0, 1, 0.1), true
		}
		return vllmText(inferenceModel, float64(queue.Load()), 8, 0.6), true
	}, []string{ns})
	name := hpa.Spec.ScaleTargetRef.Name
	e.createInferenceLWS(ctx, t, ns, name, e.scrapeAnnotations())
	metric := hpa.Spec.Metrics[0].Pods.Metric.Name

	e.waitListed(ctx, t, e.metrics)
	// Served values before any HPA: the leader's group sum, each worker's
	// own, the LWS object, and a metricLabelSelector.
	leader := types.NamespacedName{Namespace: ns, Name: name + "-0"}
	e.waitRaw(ctx, t, podPath(leader, metric, ""), 0)
	queue.Store(10)
	began := time.Now()
	e.waitRaw(ctx, t, podPath(leader, metric, ""), 20_000)
	t.Logf("leader %s serves its group's %s=20 %v after the workers' queues grew", leader.Name, metric, since(began))
	e.waitRaw(ctx, t, podPath(types.NamespacedName{Namespace: ns, Name: name + "-0-1"}, metric, ""), 10_000)
	e.waitRaw(ctx, t, lwsPath(ns, name, metric, ""), 20_000)
	e.waitGroupSeries(ctx, t, ns, name, metric, 20)
	e.waitRaw(ctx, t, podPath(leader, metric, "model_name="+inferenceModel), 20_000)
	e.waitAbsent(ctx, t, podPath(leader, metric, "model_name=other"))
	queue.Store(0)
	e.waitRaw(ctx, t, podPath(leader, metric, ""), 0)

	e.applyHPA(ctx, t, ns, hpa)
	e.scaleOnLoad(ctx, t, ns, hpa, loadSwitch(&queue, 10, 0))
	e.checkFailingMember(ctx, t, ns, leader, metric, func(name string) { broken.Store(&name) }, func() { broken.Store(nil) })
}

// checkFailingMember breaks one worker's endpoint (500): the leader's group
// value goes missing, the failure is counted under http_status and logged
// once however many ticks it lasts; mended, the value is back and the
// recovery logged once.
func (e *inferenceEnv) checkFailingMember(ctx context.Context, t *testing.T, ns string, leader types.NamespacedName, metric string, breakPod func(string), mend func()) {
	t.Helper()
	worker := leader.Name + "-1"
	target := "pod/" + ns + "/" + worker
	const failuresName = "group_metrics_server_endpoints_target_failures_total"
	failures := []string{`kind="pod"`, `reason="http_status"`}
	before, err := metricOf(ctx, e.server, failuresName, failures...)
	must(t, err)
	// Only what the server logs from here on counts: the worker may have
	// been refused once before its fake endpoint listened.
	logStart, err := os.Stat(e.server.Process.LogPath())
	must(t, err)
	breakPod(worker)
	e.waitAbsent(ctx, t, podPath(leader, metric, ""))
	// Three more failed ticks at least, then one log line for them all.
	must(t, e.poll(ctx, 5*suite.resolution+suite.timeout+10*time.Second, "three failed scrapes of "+worker,
		metricCheck(e.server, valueAtLeast(before+3), failuresName, failures...)))
	mend()
	e.waitRaw(ctx, t, podPath(leader, metric, ""), 0)
	// The recovery is logged by the tick that served the value again, just
	// after it stored the value.
	count := func(log []byte, msg string) int {
		n := 0
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, msg) && strings.Contains(line, `target="`+target+`"`) {
				n++
			}
		}
		return n
	}
	var failed, recovered int
	must(t, e.poll(ctx, 10*time.Second, "the recovery of "+target+" in the server's log", func(context.Context) error {
		whole, err := os.ReadFile(e.server.Process.LogPath())
		if err != nil {
			return err
		}
		log := whole[logStart.Size():]
		failed, recovered = count(log, "Scrape of a pod endpoint failed"), count(log, "Pod endpoint scraped again")
		if recovered == 0 {
			return fmt.Errorf("%d failure lines, no recovery line yet", failed)
		}
		return nil
	}))
	if failed != 1 || recovered != 1 {
		t.Errorf("log has %d failure and %d recovery lines for %s, want one of each", failed, recovered, target)
	}
	t.Logf("a failing worker made its leader's value missing, counted under http_status and logged once; mended, the value is back")
}

// testGPUUtilization: every pod's GPU goes from 10% to 100%; each group's
// mean is 100 against a target of 80, so each HPA step wants one group more
// (ceil(100 × n / 80)) and waits for the new group's value: the new
// leader is missing until its members are all served, and counts as 0 on
// a scale-up. Drained back to 10%, 1 group.
func testGPUUtilization(ctx context.Context, t *testing.T, e *inferenceEnv, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	const ns = "e2e-inference-gpu"
	newNamespace(ctx, t, ns)
	newNamespace(ctx, t, dcgmNamespace)
	var util atomic.Int64
	util.Store(10)
	// The exporter's pod is served; the LWS's pods are listed, for the
	// exporter to attribute a GPU to each.
	var exporter atomic.Pointer[podEndpoints]
	exporter.Store(startPodEndpoints(t, e.exporterPort, func(p *corev1.Pod) (string, bool) {
		return dcgmText(p.Spec.NodeName, exporter.Load().running(ns), func(*corev1.Pod) float64 { return float64(util.Load()) }), true
	}, []string{dcgmNamespace}, ns))
	e.createExporterPod(ctx, t)
	name := hpa.Spec.ScaleTargetRef.Name
	e.createInferenceLWS(ctx, t, ns, name, nil)
	metric := hpa.Spec.Metrics[0].Pods.Metric.Name
	leader := types.NamespacedName{Namespace: ns, Name: name + "-0"}
	e.waitRaw(ctx, t, podPath(leader, metric, ""), 10_000)
	e.waitRaw(ctx, t, podPath(leader, "gpu-memory-used-mib", ""), 3*40_000_000)
	e.waitRaw(ctx, t, podPath(leader, metric, "Hostname="+suite.fleet.NodeNames[0]), 10_000)
	e.waitAbsent(ctx, t, podPath(leader, metric, "Hostname=elsewhere"))

	e.applyHPA(ctx, t, ns, hpa)
	e.scaleOnLoad(ctx, t, ns, hpa, loadSwitch(&util, 100, 10))
}

// testSGLangQueue: the SGLang HPA reads its groups' queue (workers at 2,
// the leader at 0: 4 per group, below the target of 5) and keeps one group.
func testSGLangQueue(ctx context.Context, t *testing.T, e *inferenceEnv, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	const ns = "e2e-inference-sglang"
	newNamespace(ctx, t, ns)
	startPodEndpoints(t, e.port, func(p *corev1.Pod) (string, bool) {
		if p.Labels[group.LabelWorkerIndex] == "0" {
			return sglangText(inferenceModel, 0, 0.1), true
		}
		return sglangText(inferenceModel, 2, 0.5), true
	}, []string{ns})
	name := hpa.Spec.ScaleTargetRef.Name
	e.createInferenceLWS(ctx, t, ns, name, e.scrapeAnnotations())
	e.applyHPA(ctx, t, ns, hpa)
	began := time.Now()
	e.waitReading(ctx, t, ns, hpa.Name, 4_000, e.bounds.read)
	t.Logf("HPA %s read %s=4 per group %v after it was created", hpa.Name, hpa.Spec.Metrics[0].Pods.Metric.Name, since(began))
}

// loadSwitch stores on or off in v as the load goes on or off.
func loadSwitch(v *atomic.Int64, on, off int64) func(bool) {
	return func(load bool) {
		if load {
			v.Store(on)
		} else {
			v.Store(off)
		}
	}
}
