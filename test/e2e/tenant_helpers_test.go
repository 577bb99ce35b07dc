//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/test/lws"
	"github.com/group-metrics-server/group-metrics-server/test/promtext"
)

// tenantEnv is the victim, the bystander and the endpoints every tenant's pod serves, shared by
// TestEndpointTenants' cases.
type tenantEnv struct {
	e                       *inferenceEnv
	hpa                     *autoscalingv2.HorizontalPodAutoscaler
	lws, metric, leaderNode string // the victim's
	leader, bystander       types.NamespacedName
	victimValue             int64  // the value the victim's leader serves, in milli-units
	labelsBody, seriesBody  string // two hostile tenants' bodies
	maxBytes                int64  // the file's body cap
	rssLimit, maxRSS        uint64 // the bound of the server's resident memory, and the most seen
	// workerHits counts requests to the victim's workers, exporterHits to the lookalike exporter: both must
	// stay 0.
	workerHits, exporterHits atomic.Int64
}

// newTenantEnv starts every tenant's endpoints, runs the victim's leader-only vLLM LeaderWorkerSet at a
// steady queue with the documented HPA and a bystander's pod, and waits until the HPA reads the victim's
// queue and wants one group.
func newTenantEnv(ctx context.Context, t *testing.T, e *inferenceEnv, hpa *autoscalingv2.HorizontalPodAutoscaler, maxBytes int64, rssLimit uint64) *tenantEnv {
	t.Helper()
	tn := &tenantEnv{
		e: e, hpa: hpa, lws: hpa.Spec.ScaleTargetRef.Name, metric: hpa.Spec.Metrics[0].Pods.Metric.Name,
		labelsBody: oversizedLinesText(), seriesBody: manySeriesText(100_000), maxBytes: maxBytes, rssLimit: rssLimit,
	}
	tn.leader = types.NamespacedName{Namespace: tenantVictim, Name: tn.lws + "-0"}
	tn.bystander = types.NamespacedName{Namespace: tenantBystander, Name: "engine"}
	for _, ns := range []string{tenantVictim, tenantBystander, tenantExporter, tenantLabels, tenantSeries, tenantLeaders} {
		newNamespace(ctx, t, ns)
	}
	startPodEndpoints(t, e.port, func(p *corev1.Pod) (string, bool) {
		switch p.Namespace {
		case tenantVictim:
			if p.Name == tn.leader.Name {
				return vllmText(inferenceModel, tenantQueue, 1, 0.2), true
			}
			if _, ok := p.Labels[lws.NameLabel]; ok && len(p.OwnerReferences) == 0 {
				// The pod posing as a member.
				return vllmText(inferenceModel, hostileQueue, 1, 1), true
			}
			tn.workerHits.Add(1)
			return "", false
		case tenantBystander:
			return vllmText(inferenceModel, bystanderQueue, 1, 0.2), true
		case tenantLabels:
			return tn.labelsBody, true
		case tenantSeries:
			return tn.seriesBody, true
		}
		return vllmText(inferenceModel, hostileQueue, 1, 1), true
	}, []string{tenantVictim, tenantBystander, tenantLabels, tenantSeries, tenantLeaders})
	var lookalike atomic.Pointer[podEndpoints]
	lookalike.Store(startPodEndpoints(t, e.exporter.Port, func(*corev1.Pod) (string, bool) {
		tn.exporterHits.Add(1)
		return lookalikeText(lookalike.Load().running(tenantVictim, "")), true
	}, []string{tenantExporter}, tenantVictim))

	e.createInferenceLWS(ctx, t, tenantVictim, tn.lws, e.scrapeAnnotations())
	leader, err := suite.cluster.Client().CoreV1().Pods(tenantVictim).Get(ctx, tn.leader.Name, metav1.GetOptions{})
	must(t, err)
	tn.leaderNode = leader.Spec.NodeName
	createPods(ctx, t, e.bounds.running, e.watch, tenantPod(tenantBystander, tn.bystander.Name, tn.leaderNode, nil, e.scrapeAnnotations()))
	tn.victimValue = tenantQueue * 1000
	e.waitRaw(ctx, t, podPath(tn.leader, tn.metric, ""), tn.victimValue)
	e.waitRaw(ctx, t, podPath(tn.bystander, tn.metric, ""), bystanderQueue*1000)
	e.applyHPA(ctx, t, tenantVictim, hpa)
	began := time.Now()
	e.waitReading(ctx, t, tenantVictim, hpa.Name, tn.victimValue, e.bounds.read)
	must(t, e.poll(ctx, e.bounds.read, "the victim's HPA to want 1 group", func(ctx context.Context) error {
		h, err := getHPA(ctx, tenantVictim, hpa.Name)
		if err != nil {
			return err
		}
		d := h.Status.DesiredReplicas
		return wantf(d == 1 && scalingActive(h), "desired %d; conditions %s", d, conditions(h))
	}))
	t.Logf("victim HPA reads %s=%d and wants 1 group %v after it was created", tn.metric, tenantQueue, since(began))
	// What the tenants must not move is watched from a steady start: a member's CPU counts for the HPA only
	// once a sample began after the pod was ready (group.Readiness), which can take a tick longer than its
	// endpoint's value.
	metricsEndpoint := directEndpoint(t, e.server)
	must(t, e.poll(ctx, e.bounds.read, "the victim's steady state", func(ctx context.Context) error {
		body, err := selfMetrics(ctx, metricsEndpoint)
		if err != nil {
			return err
		}
		return tn.steady(ctx, body, staleBound())
	}))
	return tn
}

// tenantPod is a bare pod on node with one container.
func tenantPod(ns, name, node string, podLabels, annotations map[string]string) *corev1.Pod {
	p := kwokPod(ns, name, node, podLabels, corev1.Container{Name: "main", Image: lws.Image})
	p.Annotations = annotations
	return p
}

// watchSteady reads, at each of the next tenantTicks ticks of the server's scraper, everything a tenant must
// not move, and fails the test on the first change: the victim leader's value, its freshness and its group's
// membership, the HPA's reading and desired replicas, /metrics, the bystander's value and freshness, the
// server's RSS, and check.
func (tn *tenantEnv) watchSteady(ctx context.Context, t *testing.T, check func(context.Context, string) error) {
	t.Helper()
	const lastTick = "group_metrics_server_scraper_last_tick_timestamp_seconds"
	metricsEndpoint := directEndpoint(t, tn.e.server)
	var last float64
	var ticks int
	var changed error
	bound := time.Duration(tenantTicks+2)*suite.resolution + suite.timeout
	must(t, tn.e.poll(ctx, bound, fmt.Sprintf("%d ticks of the server", tenantTicks), func(ctx context.Context) error {
		body, err := selfMetrics(ctx, metricsEndpoint)
		if err != nil {
			changed = fmt.Errorf("/metrics: %w", err)
			return nil
		}
		at, err := mustValue(body, lastTick)
		if err != nil {
			return err
		}
		if at == last {
			return fmt.Errorf("%d of %d ticks read", ticks, tenantTicks)
		}
		if last != 0 {
			ticks++
		}
		last = at
		if changed = tn.steady(ctx, body, staleBound()); changed == nil && check != nil {
			changed = check(ctx, body)
		}
		return wantf(changed != nil || ticks >= tenantTicks, "%d of %d ticks read", ticks, tenantTicks)
	}))
	if changed != nil {
		t.Fatalf("at tick %d of %d: %v", ticks, tenantTicks, changed)
	}
}

// seriesIs checks that the exposition body has the series name{labels} with the value want.
func seriesIs(body string, want float64, name string, labels ...string) error {
	v, ok, err := promtext.Value(body, name, labels...)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !ok {
		return fmt.Errorf("%s: absent, want %v", name, want)
	}
	return wantf(v == want, "%s = %v, want %v", name, v, want)
}

// steady checks, once, what watchSteady watches; body is /metrics.
func (tn *tenantEnv) steady(ctx context.Context, body string, stale time.Duration) error {
	if err := tn.fresh(ctx, tn.leader, tn.victimValue, stale); err != nil {
		return fmt.Errorf("victim: %w", err)
	}
	if err := tn.fresh(ctx, tn.bystander, bystanderQueue*1000, stale); err != nil {
		return fmt.Errorf("bystander: %w", err)
	}
	victim := []string{`namespace="` + tenantVictim + `"`, `leaderworkerset="` + tn.lws + `"`, `group="0"`}
	for _, m := range []string{"group_metrics_server_lws_group_members", "group_metrics_server_lws_group_members_counted"} {
		if err := seriesIs(body, inferenceGroupSize, m, victim...); err != nil {
			return fmt.Errorf("the victim's group: %w", err)
		}
	}
	endpointValue := append(victim, `metric="`+tn.metric+`"`)
	if err := seriesIs(body, tenantQueue, "group_metrics_server_lws_group_endpoint_value", endpointValue...); err != nil {
		return fmt.Errorf("the victim's group series: %w", err)
	}
	h, err := getHPA(ctx, tenantVictim, tn.hpa.Name)
	if err != nil {
		return err
	}
	if got, ok := hpaReading(h); !ok || got != tn.victimValue || h.Status.DesiredReplicas != 1 {
		return fmt.Errorf("victim HPA reads %d (%v), desired %d; want %d and 1; conditions %s", got, ok, h.Status.DesiredReplicas, tn.victimValue, conditions(h))
	}
	scale, err := lws.GetScale(ctx, tn.e.dyn, tenantVictim, tn.lws)
	if err != nil {
		return err
	}
	if scale.Spec.Replicas != 1 {
		return fmt.Errorf("the victim's LeaderWorkerSet wants %d groups", scale.Spec.Replicas)
	}
	if n := tn.workerHits.Load(); n != 0 {
		return fmt.Errorf("the victim's workers were scraped %d times", n)
	}
	p, err := readProc(tn.e.server.Process.Pid())
	if err != nil {
		return err
	}
	tn.maxRSS = max(tn.maxRSS, p.RSS)
	return wantf(p.RSS < tn.rssLimit, "server RSS %s, limit %s", mib(p.RSS), mib(tn.rssLimit))
}

// fresh checks that pod serves exactly one value of the victim's metric, wantMilli, stamped within stale of
// now.
func (tn *tenantEnv) fresh(ctx context.Context, pod types.NamespacedName, wantMilli int64, stale time.Duration) error {
	items, err := customItems(ctx, podPath(pod, tn.metric, ""))
	if err != nil {
		return err
	}
	if len(items) != 1 || items[0].Value.MilliValue() != wantMilli {
		return fmt.Errorf("%s serves %v, want one value %dm", pod, items, wantMilli)
	}
	age := time.Since(items[0].Timestamp.Time)
	return wantf(age <= stale, "%s's value is %v old, more than %v", pod, age.Round(time.Millisecond), stale)
}

// customItem is one value of a custom metrics list.
type customItem struct {
	Value     resource.Quantity `json:"value"`
	Timestamp metav1.Time       `json:"timestamp"`
}

func (c customItem) String() string { return c.Value.String() + "@" + c.Timestamp.Format(time.RFC3339) }

// customItems reads a custom metrics path, with its query, through the aggregator.
func customItems(ctx context.Context, path string) ([]customItem, error) {
	raw, err := suite.cluster.Client().Discovery().RESTClient().Get().RequestURI(path).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []customItem `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("decode %.200s: %w", raw, err)
	}
	return list.Items, nil
}

// absent checks that path answers NotFound.
func absent(ctx context.Context, path string) error {
	if items, err := customItems(ctx, path); err == nil || !apierrors.IsNotFound(err) {
		return cmp.Or(err, fmt.Errorf("%s serves %v, want NotFound", path, items))
	}
	return nil
}

// noGroupOf checks that /metrics (body) holds no group value of any group in namespace ns, and no member in
// it.
func noGroupOf(body, ns string) error {
	fams, err := promtext.Families(body)
	if err != nil {
		return err
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "group_metrics_server_lws_group_") {
			continue
		}
		for _, m := range f.GetMetric() {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "namespace" && l.GetValue() == ns }) {
				continue
			}
			v := m.GetGauge().GetValue()
			if (name == "group_metrics_server_lws_group_members" || name == "group_metrics_server_lws_group_members_counted") && v == 0 {
				continue
			}
			return fmt.Errorf("/metrics has %s%v = %v for namespace %s", name, m.GetLabel(), v, ns)
		}
	}
	return nil
}

// memoryLimit is the memory limit of the server's container in the kustomization dir, or 512 MiB when it sets
// none.
func memoryLimit(ctx context.Context, t *testing.T, dir string) uint64 {
	t.Helper()
	d := manifestDeployment(ctx, t, dir)
	for _, c := range d.Spec.Template.Spec.Containers {
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && c.Name == "group-metrics-server" {
			t.Logf("the manifests limit the server's memory to %s", q.String())
			return uint64(q.Value())
		}
	}
	t.Logf("the manifests set no memory limit; the server's RSS is held under 512 MiB")
	return 512 << 20
}

// oversizedLinesText is a 4 MiB body of vLLM queue lines 8 KiB long (the longest line the filter keeps), each
// carrying as many empty labels as fit in it.
func oversizedLinesText() string {
	const bodyBytes, lineBytes = 4 << 20, 8 << 10
	var line strings.Builder
	line.WriteString("vllm:num_requests_waiting{")
	for i := 0; ; i++ {
		l := fmt.Sprintf("l%d=\"\",", i)
		if line.Len()+len(l)+len("} 1\n") > lineBytes {
			break
		}
		line.WriteString(l)
	}
	s := line.String()
	s = s[:len(s)-1] + "}" + strings.Repeat(" ", lineBytes-len(s)-len(" 1\n")) + " 1\n"
	return strings.Repeat(s, bodyBytes/lineBytes)
}

// manySeriesText is n series of vLLM's queue, with a one-letter label so that 100,000 of them stay under the
// file's 4 MiB body cap: the series cap, not the body's, is what they meet.
func manySeriesText(n int) string {
	var b strings.Builder
	b.WriteString("# TYPE vllm:num_requests_waiting gauge\n")
	for i := range n {
		fmt.Fprintf(&b, "vllm:num_requests_waiting{e=\"%d\"} 1\n", i)
	}
	return b.String()
}

// lookalikeText is what a lookalike DCGM exporter claims: every listed pod holds a GPU at 100% and queues
// 1000 requests.
func lookalikeText(pods []*corev1.Pod) string {
	var b strings.Builder
	b.WriteString("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
	for i, p := range pods {
		fmt.Fprintf(&b, "DCGM_FI_DEV_GPU_UTIL{gpu=\"%d\",UUID=\"GPU-%04d\",Hostname=%q,container=\"main\",namespace=%q,pod=%q} 100\n", i, i, p.Spec.NodeName, p.Namespace, p.Name)
	}
	b.WriteString("# TYPE vllm:num_requests_waiting gauge\n")
	for _, p := range pods {
		fmt.Fprintf(&b, "vllm:num_requests_waiting{model_name=%q,container=\"main\",namespace=%q,pod=%q} %d\n", inferenceModel, p.Namespace, p.Name, hostileQueue)
	}
	return b.String()
}
