//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
	"github.com/group-metrics-server/group-metrics-server/test/cluster"
	"github.com/group-metrics-server/group-metrics-server/test/e2e/env"
)

const (
	inferenceGroupSize = 3
	// A label value, so that a metricLabelSelector can name it (a
	// Hugging Face name with a slash cannot be selected by equality).
	inferenceModel = "llama-3.1-70b-instruct"
)

// TestInferenceAutoscaling runs the server of
// manifests/examples/inference-autoscaling against LeaderWorkerSets whose
// pods serve Prometheus endpoints.
func TestInferenceAutoscaling(t *testing.T) {
	ctx := begin(t, 15*time.Minute)
	hpas, configFile, cfg := shippedInference(t)
	ie := deployInferenceServer(ctx, t, newLWSEnv(ctx, t), "group-metrics-server-inference", configFile, cfg)

	t.Run("vLLM queue depth", func(t *testing.T) { testVLLMQueue(ctx, t, ie, hpas["vllm"]) })
	t.Run("GPU utilization", func(t *testing.T) { testGPUUtilization(ctx, t, ie, hpas["vllm-gpu"]) })
	t.Run("SGLang queue", func(t *testing.T) { testSGLangQueue(ctx, t, ie, hpas["sglang"]) })
}

// inferenceManifests is the kustomization the inference tests deploy.
const inferenceManifests = "manifests/examples/inference-autoscaling"

// shippedInference reads what the inference tests run as shipped: the HPAs
// of docs/inference-autoscaling.md, and the pod-metrics file of
// manifests/components/pod-metrics with its parsed configuration (one node
// exporter).
func shippedInference(t *testing.T) (hpas map[string]*autoscalingv2.HorizontalPodAutoscaler, configFile string, cfg *promscrape.Config) {
	t.Helper()
	hpas = docHPAs(t, repoPath(t, "docs", "inference-autoscaling.md"))
	configFile = repoPath(t, "manifests", "components", "pod-metrics", "pod-metrics.yaml")
	cfg, errs := promscrape.Parse(readFile(t, configFile))
	if len(errs) > 0 || len(cfg.NodeExporters) != 1 {
		t.Fatalf("%s: %v (want one node exporter)", configFile, errs)
	}
	return hpas, configFile, cfg
}

// deployInferenceServer deploys a server named name from inferenceManifests
// with the shipped pod-metrics file (configFile, parsed as cfg),
// --group-metrics-series and args, and returns the inference tests' env of
// it and e.
func deployInferenceServer(ctx context.Context, t *testing.T, e *lwsEnv, name, configFile string, cfg *promscrape.Config, args ...string) *inferenceEnv {
	t.Helper()
	args = append([]string{"--pod-metrics-config=" + configFile, "--group-metrics-series"}, args...)
	s := deployOwnServer(ctx, t, name, args, repoPath(t, inferenceManifests))
	e.watch = append(e.watch, s.Process)
	ports, err := cluster.FreePorts(1)
	must(t, err)
	return &inferenceEnv{lwsEnv: e, server: s, metrics: cfg.Metrics, port: ports[0], exporter: cfg.NodeExporters[0]}
}

type inferenceEnv struct {
	*lwsEnv
	server   *env.Server
	metrics  []promscrape.Metric     // those of the shipped file
	port     int                     // the port the serving pods announce
	exporter promscrape.NodeExporter // the shipped file's DCGM exporter: its port and trusted namespaces
}

// testVLLMQueue: the multi-node layout of the LWS project's vLLM example,
// where the leader runs vLLM's API server and the workers run Ray: only the
// leader template opts in, the leader's endpoint reports the whole group's
// queue, and the workers serve nothing and are never scraped. The leader's
// queue grows to 20; it serves its own 20 as its group's value, the HPA
// wants ceil(20 / 5) = 4 groups, its maximum, in one step; drained, 1.
func testVLLMQueue(ctx context.Context, t *testing.T, e *inferenceEnv, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	const ns = "e2e-inference-vllm"
	newNamespace(ctx, t, ns)
	var queue atomic.Int64
	var broken atomic.Pointer[string]
	workers := e.leaderOnlyEndpoints(t, ns, func(p *corev1.Pod) (string, bool) {
		if b := broken.Load(); b != nil && *b == p.Name {
			return "", false
		}
		return vllmText(inferenceModel, float64(queue.Load()), 8, 0.6), true
	})
	name := hpa.Spec.ScaleTargetRef.Name
	e.createInferenceLWS(ctx, t, ns, name, e.scrapeAnnotations())
	metric := hpa.Spec.Metrics[0].Pods.Metric.Name

	e.waitListed(ctx, t, e.metrics)
	// Served values before any HPA: the leader's (its group's), none for
	// the workers, the LWS object, and a metricLabelSelector.
	leader := types.NamespacedName{Namespace: ns, Name: name + "-0"}
	leaderPath := podPath(leader, metric, "")
	e.waitRaw(ctx, t, leaderPath, 0)
	queue.Store(20)
	began := time.Now()
	e.waitRaw(ctx, t, leaderPath, 20_000)
	t.Logf("leader %s serves its group's %s=20 %v after its queue grew", leader.Name, metric, since(began))
	e.waitWorkersAbsent(ctx, t, leader, metric)
	e.waitRaw(ctx, t, lwsPath(ns, name, metric, ""), 20_000)
	e.waitGroupSeries(ctx, t, ns, name, metric, 20)
	e.waitRaw(ctx, t, podPath(leader, metric, "model_name="+inferenceModel), 20_000)
	e.waitAbsent(ctx, t, podPath(leader, metric, "model_name=other"))
	queue.Store(0)
	e.waitRaw(ctx, t, leaderPath, 0)

	e.applyHPA(ctx, t, ns, hpa)
	e.scaleOnLoad(ctx, t, ns, hpa, loadSwitch(&queue, 20, 0))
	e.checkFailingMember(ctx, t, ns, leader, metric, func(name string) { broken.Store(&name) }, func() { broken.Store(nil) })
	if n := workers.Load(); n != 0 {
		t.Errorf("the server scraped workers %d times; only the leader template opts in", n)
	}
}

// checkFailingMember breaks the leader's endpoint (500), the one member in
// scope (a worker has none): the leader's group value goes missing, the
// failure is counted under http_status and logged once however many ticks
// it lasts; mended, the value is back and the recovery logged once.
func (e *inferenceEnv) checkFailingMember(ctx context.Context, t *testing.T, ns string, leader types.NamespacedName, metric string, breakPod func(string), mend func()) {
	t.Helper()
	target := "pod/" + ns + "/" + leader.Name
	const failuresName = "group_metrics_server_scraper_target_failures_total"
	failures := []string{`source="endpoints"`, `reason="http_status"`}
	before := mustMetric(ctx, t, e.server, failuresName, failures...)
	// Only what the server logs from here on counts: the leader may have
	// been refused once before its fake endpoint listened.
	logStart, err := os.Stat(e.server.Process.LogPath())
	must(t, err)
	breakPod(leader.Name)
	e.waitAbsent(ctx, t, podPath(leader, metric, ""))
	// Three more failed ticks at least, then one log line for them all.
	must(t, e.poll(ctx, 5*suite.resolution+suite.timeout+10*time.Second, "three failed scrapes of "+leader.Name,
		metricCheck(e.server, valueAtLeast(before+3), failuresName, failures...)))
	mend()
	e.waitRaw(ctx, t, podPath(leader, metric, ""), 0)
	// The recovery is logged by the tick that served the value again, just
	// after it stored the value.
	var failed, recovered int
	must(t, e.poll(ctx, 10*time.Second, "the recovery of "+target+" in the server's log", func(context.Context) error {
		whole, err := os.ReadFile(e.server.Process.LogPath())
		if err != nil {
			return err
		}
		log, at := string(whole[logStart.Size():]), `target="`+target+`"`
		failed, recovered = len(matchingLines(log, at, "Scrape target failing")), len(matchingLines(log, at, "Scrape target recovered"))
		if recovered == 0 {
			return fmt.Errorf("%d failure lines, no recovery line yet", failed)
		}
		return nil
	}))
	if failed != 1 || recovered != 1 {
		t.Errorf("log has %d failure and %d recovery lines for %s, want one of each", failed, recovered, target)
	}
	t.Logf("a failing leader endpoint made its group's value missing, counted under http_status and logged once; mended, the value is back")
}

// testGPUUtilization: every pod's GPU goes from 10% to 100%; each group's
// mean is 100 against a target of 80, so each HPA step wants one group more
// (ceil(100 × n / 80)) and waits for the new group's value: the new
// leader is missing until its members are all served, and counts as 0 on
// a scale-up. Drained back to 10%, 1 group. The exporter runs as a
// DaemonSet would, one pod per node in the namespace the shipped file
// trusts, and names only the pods on its own node.
func testGPUUtilization(ctx context.Context, t *testing.T, e *inferenceEnv, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	const ns = "e2e-inference-gpu"
	exporterNS := e.exporter.Namespaces[0]
	newNamespace(ctx, t, ns)
	newNamespace(ctx, t, exporterNS)
	var util atomic.Int64
	util.Store(10)
	// The exporters' pods are served; the LWS's pods are listed, for each
	// exporter to attribute a GPU to each pod on its node.
	var exporter atomic.Pointer[podEndpoints]
	exporter.Store(startPodEndpoints(t, e.exporter.Port, func(p *corev1.Pod) (string, bool) {
		return dcgmText(p.Spec.NodeName, exporter.Load().running(ns, p.Spec.NodeName), func(*corev1.Pod) float64 { return float64(util.Load()) }), true
	}, []string{exporterNS}, ns))
	e.createExporterPods(ctx, t, exporterNS)
	name := hpa.Spec.ScaleTargetRef.Name
	e.createInferenceLWS(ctx, t, ns, name, nil)
	metric := hpa.Spec.Metrics[0].Pods.Metric.Name
	leader := types.NamespacedName{Namespace: ns, Name: name + "-0"}
	e.waitRaw(ctx, t, podPath(leader, metric, ""), 10_000)
	e.waitRaw(ctx, t, podPath(leader, "gpu-memory-used-mib", ""), 3*40_000_000)
	// Each pod's GPU is reported by its own node's exporter (Hostname):
	// a worker's own value selects its node; the leader's group value
	// selects the nodes of all its members, and has none elsewhere.
	pods, err := e.waitPods(ctx, ns, name, inferenceGroupSize, e.bounds.running)
	must(t, err)
	var nodes []string
	for _, p := range pods {
		nodes = append(nodes, p.Spec.NodeName)
		if p.Name != leader.Name {
			e.waitRaw(ctx, t, podPath(types.NamespacedName{Namespace: ns, Name: p.Name}, metric, "Hostname="+p.Spec.NodeName), 10_000)
		}
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	e.waitRaw(ctx, t, podPath(leader, metric, "Hostname in ("+strings.Join(nodes, ",")+")"), 10_000)
	e.waitAbsent(ctx, t, podPath(leader, metric, "Hostname=elsewhere"))
	t.Logf("group %s's pods on nodes %v, each reported by its node's exporter", leader.Name, nodes)

	e.applyHPA(ctx, t, ns, hpa)
	e.scaleOnLoad(ctx, t, ns, hpa, loadSwitch(&util, 100, 10))
	// Each exporter named only pods on its own node: nothing was dropped
	// for naming a pod elsewhere.
	otherNode := mustMetric(ctx, t, e.server, "group_metrics_server_endpoints_dropped_samples_total", `kind="exporter"`, `reason="other_node"`)
	if otherNode != 0 {
		t.Errorf("%v exporter samples dropped as other_node; each exporter names only its node's pods", otherNode)
	}
}

// testSGLangQueue: the multi-node layout of the LWS project's SGLang
// example, where only rank 0 (the leader) serves HTTP: the leader's queue
// is its group's, 4, below the target of 5, so the HPA reads 4 per group
// and keeps one group; the workers have no value and are never scraped.
func testSGLangQueue(ctx context.Context, t *testing.T, e *inferenceEnv, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	const ns = "e2e-inference-sglang"
	newNamespace(ctx, t, ns)
	workers := e.leaderOnlyEndpoints(t, ns, func(*corev1.Pod) (string, bool) {
		return sglangText(inferenceModel, 4, 0.5), true
	})
	name, metric := hpa.Spec.ScaleTargetRef.Name, hpa.Spec.Metrics[0].Pods.Metric.Name
	e.createInferenceLWS(ctx, t, ns, name, e.scrapeAnnotations())
	e.applyHPA(ctx, t, ns, hpa)
	began := time.Now()
	e.waitReading(ctx, t, ns, hpa.Name, 4_000, e.bounds.read)
	t.Logf("HPA %s read %s=4 per group %v after it was created", hpa.Name, metric, since(began))
	e.waitWorkersAbsent(ctx, t, types.NamespacedName{Namespace: ns, Name: name + "-0"}, metric)
	if n := workers.Load(); n != 0 {
		t.Errorf("the server scraped workers %d times; only the leader template opts in", n)
	}
}

func loadSwitch(v *atomic.Int64, on, off int64) func(bool) {
	return func(load bool) {
		if load {
			v.Store(on)
		} else {
			v.Store(off)
		}
	}
}
