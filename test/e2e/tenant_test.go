//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// Namespaces of TestEndpointTenants: the victim's LeaderWorkerSet, a bystander tenant's pod, and one
// namespace per hostile tenant; their queues; and how many of the server's ticks each hostile tenant is
// watched for after its refusal is counted.
const (
	tenantVictim    = "e2e-tenant-victim"
	tenantBystander = "e2e-tenant-bystander"
	tenantExporter  = "e2e-tenant-exporter"
	tenantLabels    = "e2e-tenant-labels"
	tenantSeries    = "e2e-tenant-series"
	tenantLeaders   = "e2e-tenant-leaders"
	tenantQueue     = 4 // the victim leader's: 4 against the documented target of 5 keeps one group, steady
	bystanderQueue  = 3
	hostileQueue    = 1000 // what every hostile endpoint claims
	tenantTicks     = 4
)

// TestEndpointTenants runs the server of manifests/examples/inference-autoscaling, with the shipped
// pod-metrics file, beside tenants who try to move a victim's autoscaling or the server itself through the
// pod-endpoint source: a lookalike exporter, oversized series, too many series, pods posing as leaders, and a
// labelled pod posing as a member of the victim's group. Through each, the victim's value and its HPA's
// desired replicas never change, /metrics answers, a bystander's value stays fresh, the server's memory stays
// under its limit, and the refusal is counted under its reason and logged once.
func TestEndpointTenants(t *testing.T) {
	ctx := begin(t, 20*time.Minute)
	hpas, configFile, cfg := shippedInference(t)
	for _, ns := range []string{tenantExporter, tenantLabels, tenantSeries, tenantLeaders} {
		if slices.Contains(cfg.NodeExporters[0].Namespaces, ns) {
			t.Fatalf("the shipped file trusts the hostile namespace %s", ns)
		}
	}
	// -v=2: the pod cache logs the pods it leaves out of a group at V(2).
	ie := deployInferenceServer(ctx, t, newLWSEnv(ctx, t), "group-metrics-server-tenants", configFile, cfg, "--v=2")
	tn := newTenantEnv(ctx, t, ie, hpas["vllm"], cfg.MaxBytes, memoryLimit(ctx, t, repoPath(t, inferenceManifests)))

	for _, tc := range []struct {
		name    string
		hostile func() hostile
	}{
		{"lookalike exporter", tn.lookalikeExporter},
		// The body cap when the file's maxBytes is below the body, else limits.labelsPerSeries at the first
		// line.
		{"oversized series lines", func() hostile {
			return tn.failingTarget(tenantLabels, "labels", len(tn.labelsBody), "limits.labelsPerSeries")
		}},
		// 100,000 series of vLLM's queue: the body cap, else limits.seriesPerTarget.
		{"too many series", func() hostile {
			return tn.failingTarget(tenantSeries, "series", len(tn.seriesBody), "limits.seriesPerTarget")
		}},
		{"pods posing as leaders", tn.posingLeaders},
		{"labelled pod in the victim's group", tn.posingMember},
	} {
		t.Run(tc.name, func(t *testing.T) { tn.run(ctx, t, tc.hostile()) })
	}
	t.Logf("server RSS at most %s over every tenant (limit %s)", mib(tn.maxRSS), mib(tn.rssLimit))
}

// hostile is one hostile tenant's case: its pods, created by run and deleted after; the self-metrics its
// refusal moves, each by at least (or, exact, by exactly) its delta; the server's log lines it must cause,
// each exactly once; and a check run at every tick watched, beside the victim's checks.
type hostile struct {
	pods    []*corev1.Pod
	counted []counted
	logged  [][]string
	check   func(ctx context.Context, body string) error
}

type counted struct {
	name   string
	labels []string
	delta  float64
	exact  bool
}

// lookalikeExporter: a pod in a tenant's namespace with the DCGM exporter's label, on the victim leader's
// node, whose series name the victim's pods with a GPU at 100% and a queue of 1000. It is refused as an
// exporter (exporter_namespace) and never scraped; the victim keeps no GPU value.
func (tn *tenantEnv) lookalikeExporter() hostile {
	pod := tenantPod(tenantExporter, "dcgm-exporter", tn.leaderNode, map[string]string{"app.kubernetes.io/name": "dcgm-exporter"}, nil)
	return hostile{
		pods: []*corev1.Pod{pod},
		counted: []counted{{name: "group_metrics_server_endpoints_refused_targets_total",
			labels: []string{`kind="exporter"`, `reason="exporter_namespace"`}, delta: 1}},
		logged: [][]string{{`"Pod refused as a scrape target"`, `pod="` + tenantExporter + `/dcgm-exporter"`, `reason="exporter_namespace"`}},
		check: func(ctx context.Context, _ string) error {
			if n := tn.exporterHits.Load(); n != 0 {
				return fmt.Errorf("the lookalike exporter was scraped %d times", n)
			}
			return absent(ctx, podPath(tn.leader, "gpu-utilization", ""))
		},
	}
}

// failingTarget is a pod ns/name opting in with a body of size bytes (4 MiB of 8 KiB lines each carrying as
// many labels as it can hold, or 100,000 series), which fails as too_large for the cause: the body cap, or
// limit within it; it has no value.
func (tn *tenantEnv) failingTarget(ns, name string, size int, limit string) hostile {
	cause := limit
	if int64(size) > tn.maxBytes {
		cause = fmt.Sprintf("larger than %d bytes", tn.maxBytes)
	}
	pod := tenantPod(ns, name, tn.leaderNode, nil, tn.e.scrapeAnnotations())
	return hostile{
		pods: []*corev1.Pod{pod},
		counted: []counted{{name: "group_metrics_server_scraper_target_failures_total",
			labels: []string{`source="endpoints"`, `reason="too_large"`}, delta: 1}},
		logged: [][]string{{`"Scrape target failing"`, `target="pod/` + ns + `/` + name + `"`, `reason="too_large"`, cause}},
		check: func(ctx context.Context, _ string) error {
			return absent(ctx, podPath(types.NamespacedName{Namespace: ns, Name: name}, tn.metric, ""))
		},
	}
}

// posingLeaders: two bare pods in a tenant's namespace, labelled as the
// leader of one LeaderWorkerSet group (the same labels on both), opting in
// with a queue of 1000. No LeaderWorkerSet controls them: neither leads a
// group, each is counted and logged once as unverified, and /metrics (with
// --group-metrics-series) answers with no group value for them.
func (tn *tenantEnv) posingLeaders() hostile {
	lbls := map[string]string{
		group.LabelName: "vllm", group.LabelGroupIndex: "0", group.LabelWorkerIndex: "0",
		group.LabelGroupKey: "posing-leaders",
	}
	annotations := lwsPodAnnotations(tn.e.scrapeAnnotations())
	h := hostile{
		counted: []counted{{name: "group_metrics_server_lws_unverified_pods_total", delta: 2, exact: true}},
		check:   func(_ context.Context, body string) error { return noGroupOf(body, tenantLeaders) },
	}
	for _, name := range []string{"vllm-0", "leader"} {
		h.pods = append(h.pods, tenantPod(tenantLeaders, name, tn.leaderNode, lbls, annotations))
		h.logged = append(h.logged, []string{"left out of its group", `pod="` + tenantLeaders + `/` + name + `"`})
	}
	return h
}

// posingMember: a bare pod in the victim's namespace, named and labelled as a new worker of the victim's
// group (its LeaderWorkerSet name and group index, worker index 3), opting in with a queue of 1000. No
// StatefulSet of the LeaderWorkerSet controls it: the group keeps its three members and its value, and the
// pod is counted and logged once as unverified. (With the group's group-key label too, the pod would match
// the worker StatefulSet's selector, which adopts it and deletes it as an ordinal past its replicas.)
func (tn *tenantEnv) posingMember() hostile {
	name := tn.leader.Name + "-3"
	lbls := map[string]string{group.LabelName: tn.lws, group.LabelGroupIndex: "0", group.LabelWorkerIndex: "3"}
	return hostile{
		pods:    []*corev1.Pod{tenantPod(tenantVictim, name, tn.leaderNode, lbls, lwsPodAnnotations(tn.e.scrapeAnnotations()))},
		counted: []counted{{name: "group_metrics_server_lws_unverified_pods_total", delta: 1, exact: true}},
		logged:  [][]string{{"left out of its group", `pod="` + tenantVictim + `/` + name + `"`}},
	}
}

// run creates h's pods, waits until the refusal is counted, watches tenantTicks of the server's ticks, then
// checks the log and deletes the pods.
func (tn *tenantEnv) run(ctx context.Context, t *testing.T, h hostile) {
	t.Helper()
	before := make([]float64, len(h.counted))
	for i, c := range h.counted {
		before[i] = mustMetric(ctx, t, tn.e.server, c.name, c.labels...)
	}
	logStart, err := os.Stat(tn.e.server.Process.LogPath())
	must(t, err)
	createPods(ctx, t, tn.e.bounds.running, tn.e.watch, h.pods...)
	began := time.Now()
	must(t, tn.e.poll(ctx, tn.e.bounds.up, "the refusal to be counted", func(ctx context.Context) error {
		for i, c := range h.counted {
			v, err := metricOf(ctx, tn.e.server, c.name, c.labels...)
			if err == nil && v < before[i]+c.delta {
				err = fmt.Errorf("%s%v at %v, want %v more than %v", c.name, c.labels, v, c.delta, before[i])
			}
			if err != nil {
				return err
			}
		}
		return nil
	}))
	t.Logf("refusal counted %v after the tenant's pods ran", since(began))
	tn.watchSteady(ctx, t, h.check)
	for i, c := range h.counted {
		v := mustMetric(ctx, t, tn.e.server, c.name, c.labels...)
		if c.exact && v != before[i]+c.delta {
			t.Errorf("%s%v went from %v to %v, want %v more: once per pod", c.name, c.labels, before[i], v, c.delta)
		}
		t.Logf("%s%v: %v -> %v", c.name, c.labels, before[i], v)
	}
	log := string(readFile(t, tn.e.server.Process.LogPath())[logStart.Size():])
	for _, words := range h.logged {
		if n := len(matchingLines(log, words...)); n != 1 {
			t.Errorf("the server logged %d lines with %q over %d ticks, want 1", n, words, tenantTicks)
		}
	}
}

// lwsPodAnnotations are annotations plus the group size the LeaderWorkerSet's pod webhook requires of every
// pod carrying its name label (kubernetes-sigs/lws pkg/webhooks/pod_webhook.go reads
// leaderworkerset.sigs.k8s.io/size), as a tenant who copies an LWS pod copies it.
func lwsPodAnnotations(annotations map[string]string) map[string]string {
	out := map[string]string{"leaderworkerset.sigs.k8s.io/size": strconv.Itoa(inferenceGroupSize)}
	maps.Copy(out, annotations)
	return out
}
