package provider

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

var endpointTestMetrics = []EndpointMetric{
	{Name: "waiting", Combine: group.CombineSum},
	{Name: "kv", Combine: group.CombineMean},
	{Name: "peak", Combine: group.CombineMax},
}

// series are one pod's series: per model, the same value for every metric.
type series map[string]float64

func endpointStore() *store.Store {
	return store.New(store.Config{Clock: clocktesting.NewFakeClock(now), Sources: []string{"endpoints"}, StaleAfter: time.Minute})
}

// endpointValues is a store holding, for each pod ("namespace/name"), its
// series as its own target would hand them over; uids names the pods whose
// series were read for a given UID.
func endpointValues(pods map[string]series, uids map[string]string) *store.Store {
	st := endpointStore()
	for key, byModel := range pods {
		ns, name, _ := strings.Cut(key, "/")
		var points []sources.SeriesPoint
		for model, v := range byModel {
			for _, m := range endpointTestMetrics {
				points = append(points, sources.SeriesPoint{Namespace: ns, Pod: name, UID: uids[key], Metric: m.Name,
					Series: "model_name=" + model + "\x00", Value: v, Timestamp: now})
			}
		}
		st.StoreSeries("endpoints", "pod/"+key, points, now)
	}
	return st
}

// endpointProvider serves endpointTestMetrics, or metrics when given (of
// the same names).
func endpointProvider(metrics ...EndpointMetric) *CustomMetrics {
	if metrics == nil {
		metrics = endpointTestMetrics
	}
	deleting := groupMember("old", "0", "1", corev1.PodRunning)
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	pods := []*corev1.Pod{
		testPod("ml", "solo", "n1", corev1.PodRunning, map[string]string{"app": "solo"}),
		testPod("ml", "reborn", "n1", corev1.PodRunning, nil),
		// inf group 0: complete; the leader's queue is empty.
		groupMember("inf", "0", "0", corev1.PodRunning), groupMember("inf", "0", "1", corev1.PodRunning), groupMember("inf", "0", "2", corev1.PodRunning),
		// inf group 1: worker 1 has no value, worker 2 is Pending.
		groupMember("inf", "1", "0", corev1.PodRunning), groupMember("inf", "1", "1", corev1.PodRunning), groupMember("inf", "1", "2", corev1.PodPending),
		// chat: two complete groups.
		groupMember("chat", "0", "0", corev1.PodRunning), groupMember("chat", "0", "1", corev1.PodRunning),
		groupMember("chat", "1", "0", corev1.PodRunning), groupMember("chat", "1", "1", corev1.PodRunning),
		// old: a member being deleted.
		groupMember("old", "0", "0", corev1.PodRunning), deleting,
	}
	values := endpointValues(map[string]series{
		"ml/solo": {"a": 2}, "ml/inf-0": {"a": 0}, "ml/inf-0-1": {"a": 1, "b": 3}, "ml/inf-0-2": {"a": 6}, "ml/inf-1": {"a": 1},
		"ml/chat-0": {"a": 1}, "ml/chat-0-1": {"a": 3}, "ml/chat-1": {"a": 2}, "ml/chat-1-1": {"a": 6},
		"ml/old-0": {"a": 1}, "ml/old-0-1": {"a": 1},
		"ml/reborn": {"a": 5}, // reborn was recreated under its name since the values were collected.
	}, map[string]string{"ml/reborn": "reborn-predecessor-uid"})
	return newGroupProvider(pods, nil, group.PolicyPod).CustomMetrics().WithEndpoints(values, metrics, 15*time.Second)
}

type endpointAnswer struct {
	Milli    int64
	NotFound string // a substring of the NotFound message, "" for a value
}

// checkAnswer compares c's answer for name in ns to want (a NotFound
// containing want.NotFound reads as want.NotFound, any other error fails)
// and returns the value, if any.
func checkAnswer(t *testing.T, c *CustomMetrics, ns, name string, info cmprovider.CustomMetricInfo, sel string,
	want endpointAnswer) *custom_metrics.MetricValue {
	t.Helper()
	v, err := c.GetMetricByName(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, info, selector(t, sel))
	var got endpointAnswer
	switch {
	case err == nil:
		got.Milli = v.Value.MilliValue()
	case !apierrors.IsNotFound(err):
		got.NotFound = "not a NotFound: " + err.Error()
	case want.NotFound != "" && strings.Contains(err.Error(), want.NotFound):
		got.NotFound = want.NotFound
	default:
		got.NotFound = err.Error()
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s %s/%s {%s} (-want +got):\n%s", info.Metric, ns, name, sel, diff)
	}
	return v
}

func TestEndpointMetricByName(t *testing.T) {
	c := endpointProvider()
	pod := func(m string) cmprovider.CustomMetricInfo { return cmInfo(podsResource, m) }
	lws := func(m string) cmprovider.CustomMetricInfo { return cmInfo(LWSResource, m) }
	tests := []struct {
		name, object, selector string
		info                   cmprovider.CustomMetricInfo
		want                   endpointAnswer
	}{
		{"a plain pod's own value", "solo", "", pod("waiting"), endpointAnswer{Milli: 2000}},
		{"a worker's own value, its series summed", "inf-0-1", "", pod("waiting"), endpointAnswer{Milli: 4000}},
		{"a leader's group value: 0 + 4 + 6", "inf-0", "", pod("waiting"), endpointAnswer{Milli: 10000}},
		{"mean: each member's mean (0, 2, 6), then their mean", "inf-0", "", pod("kv"), endpointAnswer{Milli: 2667}},
		{"max over the members' max", "inf-0", "", pod("peak"), endpointAnswer{Milli: 6000}},
		{"metricLabelSelector picks series before combining", "inf-0", "model_name=a", pod("waiting"), endpointAnswer{Milli: 7000}},
		{"on a worker too", "inf-0-1", "model_name=b", pod("waiting"), endpointAnswer{Milli: 3000}},
		{"a member with no matching series makes the group absent", "inf-0", "model_name=b", pod("waiting"), endpointAnswer{NotFound: "member inf-0 is missing"}},
		{"a selector nothing matches", "solo", "model_name=c", pod("waiting"), endpointAnswer{NotFound: "no matching series"}},
		{"a member without a value makes the group absent", "inf-1", "", pod("waiting"), endpointAnswer{NotFound: "member inf-1-1 is missing"}},
		{"a member being deleted makes the group absent", "old-0", "", pod("waiting"), endpointAnswer{NotFound: "member old-0-1 is ignored"}},
		{"a pod without a value", "inf-1-1", "", pod("waiting"), endpointAnswer{NotFound: "no value from the pod's endpoint"}},
		{"a pod recreated under its name, not its predecessor's value", "reborn", "", pod("waiting"), endpointAnswer{NotFound: "no value from the pod's endpoint"}},
		{"an unknown pod", "nope", "", pod("waiting"), endpointAnswer{NotFound: "nope"}},
		{"the LWS: its groups' sum", "chat", "", lws("waiting"), endpointAnswer{Milli: 12000}},
		{"the LWS: its groups' mean", "chat", "", lws("kv"), endpointAnswer{Milli: 3000}},
		{"the LWS: the selector applies", "chat", "model_name=a", lws("peak"), endpointAnswer{Milli: 6000}},
		{"an LWS with a group without a value", "inf", "", lws("waiting"), endpointAnswer{NotFound: "group of leader inf-1 has no value"}},
		{"an LWS with no pods", "none", "", lws("waiting"), endpointAnswer{NotFound: "no leader pod"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := checkAnswer(t, c, "ml", tt.object, tt.info, tt.selector, tt.want)
			if v != nil && (v.Metric.Name != tt.info.Metric || v.DescribedObject.Name != tt.object ||
				*v.WindowSeconds != 15 || !v.Timestamp.Time.Equal(now)) {
				t.Errorf("value %+v does not describe %s %s at %v over 15s", v, tt.info.Metric, tt.object, now)
			}
		})
	}
}

// TestEndpointMemberScope: a member out of the metric's scope is neither
// read nor missing. inf group 0 is complete (leader 0, workers 4 and 6);
// in group 1 worker 1 has no value and worker 2 is Pending, which only the
// leader scope leaves out.
func TestEndpointMemberScope(t *testing.T) {
	tests := []struct {
		scope  group.Scope
		leader string
		want   endpointAnswer
	}{
		{group.ScopeAll, "inf-0", endpointAnswer{Milli: 10000}},
		{group.ScopeLeader, "inf-0", endpointAnswer{Milli: 0}},
		{group.ScopeWorkers, "inf-0", endpointAnswer{Milli: 10000}},
		{group.ScopeAll, "inf-1", endpointAnswer{NotFound: "member inf-1-1 is missing"}},
		{group.ScopeLeader, "inf-1", endpointAnswer{Milli: 1000}},
		{group.ScopeWorkers, "inf-1", endpointAnswer{NotFound: "member inf-1-1 is missing"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.scope)+" "+tt.leader, func(t *testing.T) {
			m := endpointTestMetrics[0]
			m.Members = tt.scope
			checkAnswer(t, endpointProvider(m), "ml", tt.leader, cmInfo(podsResource, m.Name), "", tt.want)
		})
	}
}

// TestEndpointMetricBySelector is the HPA's read on an LWS: its scale
// selector matches the leaders, one value per group that has one.
func TestEndpointMetricBySelector(t *testing.T) {
	c := endpointProvider()
	info := cmprovider.CustomMetricInfo{GroupResource: podsResource, Namespaced: true, Metric: "waiting"}
	tests := []struct {
		name, selector, metricSelector string
		want                           map[string]int64
	}{
		{"leaders of inf: group 1 is absent", "leaderworkerset.sigs.k8s.io/name=inf,leaderworkerset.sigs.k8s.io/worker-index=0", "", map[string]int64{"inf-0": 10000}},
		{"leaders of chat", "leaderworkerset.sigs.k8s.io/name=chat,leaderworkerset.sigs.k8s.io/worker-index=0", "", map[string]int64{"chat-0": 4000, "chat-1": 8000}},
		{"every pod of chat: leaders give groups, workers themselves", "leaderworkerset.sigs.k8s.io/name=chat", "", map[string]int64{"chat-0": 4000, "chat-0-1": 3000, "chat-1": 8000, "chat-1-1": 6000}},
		{"with a metricLabelSelector", "app=solo", "model_name=a", map[string]int64{"solo": 2000}},
		{"a metricLabelSelector nothing matches", "app=solo", "model_name=b", map[string]int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := c.GetMetricBySelector(context.Background(), "ml", selector(t, tt.selector), info, selector(t, tt.metricSelector))
			must(t, err)
			got := map[string]int64{}
			for _, v := range list.Items {
				got[v.DescribedObject.Name] = v.Value.MilliValue()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GetMetricBySelector (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEndpointMetricsListed(t *testing.T) {
	got := map[string]bool{}
	for _, m := range endpointProvider().ListAllMetrics() {
		got[m.GroupResource.String()+"/"+m.Metric] = m.Namespaced
	}
	want := map[string]bool{}
	for _, gr := range []string{"pods", "leaderworkersets.leaderworkerset.x-k8s.io"} {
		for _, m := range append([]string{"kv", "peak", "waiting"}, metricNames...) {
			want[gr+"/"+m] = true
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListAllMetrics (-want +got):\n%s", diff)
	}
	// Without groups, the pod-endpoint metrics on pods only.
	p := newGroupProvider([]*corev1.Pod{testPod("ml", "solo", "n1", corev1.PodRunning, nil)}, nil, group.PolicyPod)
	var names []string
	for _, m := range p.CustomMetrics().WithEndpoints(endpointValues(nil, nil), endpointTestMetrics, time.Second).ListAllMetrics() {
		names = append(names, m.GroupResource.String()+"/"+m.Metric)
	}
	if diff := cmp.Diff([]string{"pods/kv", "pods/peak", "pods/waiting"}, names); diff != "" {
		t.Errorf("ListAllMetrics without groups (-want +got):\n%s", diff)
	}
}

// TestEndpointGroupSeries: one series per group and metric where the group
// has a value; none for inf's group 1 (a member without a value) nor old's
// (a member being deleted).
func TestEndpointGroupSeries(t *testing.T) {
	c := endpointProvider()
	reg := metrics.NewKubeRegistry()
	reg.CustomMustRegister(NewEndpointGroupSeriesCollector(c.EndpointGroupSamples))
	series := func(lws, g, metric, v string) string {
		return `group_metrics_server_lws_group_endpoint_value{group="` + g + `",leaderworkerset="` + lws + `",metric="` + metric + `",namespace="ml"} ` + v + "\n"
	}
	want := `# HELP group_metrics_server_lws_group_endpoint_value [ALPHA] A LeaderWorkerSet group's value of a metric read from pod endpoints or node exporters (--pod-metrics-config), by served metric name; absent while a member has none.
# TYPE group_metrics_server_lws_group_endpoint_value gauge
` + series("chat", "0", "kv", "2") + series("chat", "0", "peak", "3") + series("chat", "0", "waiting", "4") +
		series("chat", "1", "kv", "4") + series("chat", "1", "peak", "6") + series("chat", "1", "waiting", "8") +
		series("inf", "0", "kv", "2.6666666666666665") + series("inf", "0", "peak", "6") + series("inf", "0", "waiting", "10")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if got := newGroupProvider(nil, nil, group.PolicyPod).CustomMetrics().EndpointGroupSamples(); got != nil {
		t.Errorf("EndpointGroupSamples without endpoints = %v, want nil", got)
	}
}

// seriesProvider has group 0 of "inf" (a leader and two workers, all with
// metrics), group 1 (a leader without metrics) and group 2 (a leader with
// metrics and a worker without), plus a pod outside any LeaderWorkerSet.
func seriesProvider() *Provider {
	pods := []*corev1.Pod{
		lwsPod("0", "", map[string]string{"main": "750m", "sidecar": "250m"}),
		lwsPod("1", "", map[string]string{"main": "1"}),
		lwsPod("2", "", map[string]string{"main": "1"}),
	}
	lone := lwsPod("0", "", map[string]string{"main": "1"})
	lone.Name, lone.UID = "inf-1", "inf-1-uid"
	lone.Labels = map[string]string{group.LabelName: "inf", group.LabelGroupIndex: "1", group.LabelWorkerIndex: "0"}
	plain := testPod("ml", "web", "n1", corev1.PodRunning, map[string]string{"app": "web"})
	pods = append(pods, lone, plain)
	for worker, name := range []string{"inf-2", "inf-2-1"} {
		p := lwsPod("0", "", map[string]string{"main": "1"})
		p.Name, p.UID = name, types.UID(name+"-uid")
		p.Labels = map[string]string{group.LabelName: "inf", group.LabelGroupIndex: "2", group.LabelWorkerIndex: strconv.Itoa(worker)}
		pods = append(pods, p)
	}
	usage := map[string]store.PodUsage{
		"ml/inf-2":   containerUsage(map[string]uint64{"main": 100_000_000}),
		"ml/inf-0":   containerUsage(map[string]uint64{"main": 80_000_000, "sidecar": 20_000_000}),
		"ml/inf-0-1": containerUsage(map[string]uint64{"main": 900_000_000}),
		"ml/inf-0-2": containerUsage(map[string]uint64{"main": 900_000_000}),
		"ml/web":     usage(500_000_000, 1<<30),
	}
	return newGroupProvider(pods, usage, group.PolicyPod)
}

func TestGroupSamples(t *testing.T) {
	got := seriesProvider().GroupSamples()
	// Group 0: 0.1 + 0.9 + 0.9 cores of 3 requested; 4 containers of 256Mi
	// of 4Gi requested (1Gi per container).
	want := []GroupSample{
		{Namespace: "ml", LeaderWorkerSet: "inf", Group: "0", CPUCores: 1.9, MemoryBytes: 4 * 256 << 20, HasUsage: true,
			CPUUtilization: 1.9 / 3, HasCPUUtilization: true, MemoryUtilization: 0.25, HasMemoryUtilization: true,
			Members: 3, Counted: 3},
		{Namespace: "ml", LeaderWorkerSet: "inf", Group: "1", Members: 1},
		// The worker without metrics withholds every value, as on
		// custom.metrics.k8s.io, rather than a sum of the leader alone.
		{Namespace: "ml", LeaderWorkerSet: "inf", Group: "2", Members: 2, Counted: 1},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("GroupSamples (-want +got):\n%s", diff)
	}
	if got := New(Config{}).GroupSamples(); got != nil {
		t.Errorf("GroupSamples without a group index = %v, want nil", got)
	}
}

// TestGroupSamplesOnePerGroup: two pods posing as one group's leader give
// one sample, so the series stay unique and /metrics keeps answering.
func TestGroupSamplesOnePerGroup(t *testing.T) {
	leader := lwsPod("0", "", map[string]string{"main": "1"})
	twin := lwsPod("0", "", map[string]string{"main": "1"})
	twin.Name, twin.UID = "inf-0-twin", "inf-0-twin-uid"
	usage := map[string]store.PodUsage{"ml/inf-0": usage(100_000_000, 1<<20), "ml/inf-0-twin": usage(100_000_000, 1<<20)}
	p := newGroupProvider([]*corev1.Pod{leader, twin}, usage, group.PolicyPod)
	if got := p.GroupSamples(); len(got) != 1 {
		t.Fatalf("GroupSamples = %+v, want one sample for group 0", got)
	}
	reg := metrics.NewKubeRegistry()
	reg.CustomMustRegister(NewGroupSeriesCollector(p.GroupSamples))
	if _, err := reg.Gather(); err != nil {
		t.Errorf("Gather with two leaders of one group: %v", err)
	}
}

// TestGroupSeriesCollector checks the exposition: every value of a group
// with metrics, only the member counts for one without, nothing for pods
// outside a LeaderWorkerSet.
func TestGroupSeriesCollector(t *testing.T) {
	p := seriesProvider()
	samples := p.GroupSamples()
	c := NewGroupSeriesCollector(func() []GroupSample {
		// The utilizations of group 0 are rounded to values the
		// exposition prints exactly.
		s := append([]GroupSample(nil), samples...)
		s[0].CPUUtilization = 0.625
		return s
	})
	reg := metrics.NewKubeRegistry()
	reg.CustomMustRegister(c)
	labels := `{group="0",leaderworkerset="inf",namespace="ml"}`
	lone := `{group="1",leaderworkerset="inf",namespace="ml"}`
	partial := `{group="2",leaderworkerset="inf",namespace="ml"}`
	want := `
# HELP group_metrics_server_lws_group_cpu_usage_cores [ALPHA] CPU usage of a LeaderWorkerSet group's members, in cores; absent while a member has no metrics.
# TYPE group_metrics_server_lws_group_cpu_usage_cores gauge
group_metrics_server_lws_group_cpu_usage_cores` + labels + ` 1.9
# HELP group_metrics_server_lws_group_cpu_utilization [ALPHA] CPU usage over CPU requests of a LeaderWorkerSet group's members that request CPU (0.7 = 70%); absent while a member has no metrics.
# TYPE group_metrics_server_lws_group_cpu_utilization gauge
group_metrics_server_lws_group_cpu_utilization` + labels + ` 0.625
# HELP group_metrics_server_lws_group_members [ALPHA] Pods of a LeaderWorkerSet group known to the server.
# TYPE group_metrics_server_lws_group_members gauge
group_metrics_server_lws_group_members` + labels + ` 3
group_metrics_server_lws_group_members` + lone + ` 1
group_metrics_server_lws_group_members` + partial + ` 2
# HELP group_metrics_server_lws_group_members_counted [ALPHA] Pods of a LeaderWorkerSet group that count at face value as the HPA counts pods.
# TYPE group_metrics_server_lws_group_members_counted gauge
group_metrics_server_lws_group_members_counted` + labels + ` 3
group_metrics_server_lws_group_members_counted` + lone + ` 0
group_metrics_server_lws_group_members_counted` + partial + ` 1
# HELP group_metrics_server_lws_group_memory_usage_bytes [ALPHA] Working-set memory of a LeaderWorkerSet group's members, in bytes; absent while a member has no metrics.
# TYPE group_metrics_server_lws_group_memory_usage_bytes gauge
group_metrics_server_lws_group_memory_usage_bytes` + labels + ` 1.073741824e+09
# HELP group_metrics_server_lws_group_memory_utilization [ALPHA] Memory usage over memory requests of a LeaderWorkerSet group's members that request memory (0.7 = 70%); absent while a member has no metrics.
# TYPE group_metrics_server_lws_group_memory_utilization gauge
group_metrics_server_lws_group_memory_utilization` + labels + ` 0.25
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestEndpointHistogram: a histogram metric's parts are added up over a
// pod's series, a group's members and a LeaderWorkerSet's groups before
// the estimate is made, as sum by (le) before histogram_quantile.
func TestEndpointHistogram(t *testing.T) {
	type parts struct{ le01, le05, inf, sum float64 } // rates; count = inf
	byPod := map[string]parts{
		"chat-0": {1, 3, 4, 0.8}, "chat-0-1": {3, 4, 4, 0.4},
		"chat-1": {0, 2, 2, 0.6}, "chat-1-1": {0, 0, 2, 2.0},
		"inf-1": {1, 1, 1, 0.1}, // inf-1-1 has none
	}
	st := endpointStore()
	for name, p := range byPod {
		var points []sources.SeriesPoint
		add := func(v float64, part, le string) {
			key := sources.LabelHistogramPart + "=" + part + "\x00"
			if le != "" {
				key += sources.LabelLE + "=" + le + "\x00"
			}
			points = append(points, sources.SeriesPoint{Namespace: "ml", Pod: name, Metric: "ttft", Series: key + "model_name=a\x00", Value: v, Timestamp: now})
		}
		add(p.le01, sources.PartBucket, "0.1")
		add(p.le05, sources.PartBucket, "0.5")
		add(p.inf, sources.PartBucket, "+Inf")
		add(p.sum, sources.PartSum, "")
		add(p.inf, sources.PartCount, "")
		st.StoreSeries("endpoints", "pod/ml/"+name, points, now)
	}
	pods := []*corev1.Pod{
		groupMember("chat", "0", "0", corev1.PodRunning), groupMember("chat", "0", "1", corev1.PodRunning),
		groupMember("chat", "1", "0", corev1.PodRunning), groupMember("chat", "1", "1", corev1.PodRunning),
		groupMember("inf", "1", "0", corev1.PodRunning), groupMember("inf", "1", "1", corev1.PodRunning),
	}
	estimating := func(e group.Estimate) *CustomMetrics {
		return newGroupProvider(pods, nil, group.PolicyPod).CustomMetrics().
			WithEndpoints(st, []EndpointMetric{{Name: "ttft", Estimate: &e}}, 15*time.Second)
	}
	c, mean := estimating(group.Estimate{Quantile: 0.5}), estimating(group.Estimate{Mean: true})
	for _, tt := range []struct {
		name, object string
		lws          bool
		cm           *CustomMetrics
		selector     string
		want         endpointAnswer
	}{
		// rank 2 of 4 is 2 of the 3 at or below 0.1: 0.0667.
		{name: "a worker's own median", object: "chat-0-1", cm: c, want: endpointAnswer{Milli: 67}},
		{name: "a worker's own mean: 0.4 / 4", object: "chat-0-1", cm: mean, want: endpointAnswer{Milli: 100}},
		// pooled 4, 7, 8: rank 4 is the top of (0, 0.1].
		{name: "a leader's group median, buckets pooled", object: "chat-0", cm: c, want: endpointAnswer{Milli: 100}},
		{name: "a leader's group mean: 1.2 / 8", object: "chat-0", cm: mean, want: endpointAnswer{Milli: 150}},
		// pooled 4, 9, 12: rank 6 is 2 of the 5 in (0.1, 0.5].
		{name: "the LWS's median over all its groups", object: "chat", lws: true, cm: c, want: endpointAnswer{Milli: 260}},
		{name: "the LWS's mean: 3.8 / 12", object: "chat", lws: true, cm: mean, want: endpointAnswer{Milli: 317}},
		{name: "a member without parts makes the group absent", object: "inf-1", cm: c, want: endpointAnswer{NotFound: "member inf-1-1 is missing"}},
		{name: "a selector nothing matches", object: "chat-0-1", selector: "model_name=b", cm: c, want: endpointAnswer{NotFound: "no value"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			info := cmInfo(podsResource, "ttft")
			if tt.lws {
				info = cmInfo(LWSResource, "ttft")
			}
			checkAnswer(t, tt.cm, "ml", tt.object, info, tt.selector, tt.want)
		})
	}
}

// TestEndpointPoolValue: an InferencePool's value of a metric its endpoint
// picker supplies. "gw/busy"'s picker has two series; "gw/idle"'s was read
// with none (the demand at zero: a sum is 0, a mean has no value); nothing
// read "gw/down"'s. A metric no picker supplies is not served on pools.
func TestEndpointPoolValue(t *testing.T) {
	st := endpointStore()
	busy, idle := sources.ObjectKey(sources.InferencePools, "busy"), sources.ObjectKey(sources.InferencePools, "idle")
	var points []sources.SeriesPoint
	for i, v := range []float64{3, 4} {
		for _, m := range []string{"queue", "latency"} {
			points = append(points, sources.SeriesPoint{Namespace: "gw", Pod: busy, Metric: m, Series: "fairness_id=" + strconv.Itoa(i) + "\x00", Value: v, Timestamp: now})
		}
	}
	// A histogram's parts, as the store holds their rates: 3 s over 6
	// requests, a mean of 0.5 s.
	for part, v := range map[string]float64{sources.PartSum: 3, sources.PartCount: 6} {
		points = append(points, sources.SeriesPoint{Namespace: "gw", Pod: busy, Metric: "ttft", Series: sources.LabelHistogramPart + "=" + part + "\x00", Value: v, Timestamp: now})
	}
	st.StoreSeries("endpoints", "picker/busy/gw/epp-busy", append(points, sources.SeriesPoint{Namespace: "gw", Pod: busy, Timestamp: now}), now)
	st.StoreSeries("endpoints", "picker/idle/gw/epp-idle", []sources.SeriesPoint{{Namespace: "gw", Pod: idle, Timestamp: now}}, now)
	c := newGroupProvider(nil, nil, group.PolicyPod).CustomMetrics().WithEndpoints(st, []EndpointMetric{
		{Name: "queue", Combine: group.CombineSum, OnPools: true},
		{Name: "latency", Combine: group.CombineMean, OnPools: true},
		{Name: "waiting", Combine: group.CombineSum},
		{Name: "ttft", Estimate: &group.Estimate{Mean: true}, OnPools: true},
		{Name: "ttft-strict", Estimate: &group.Estimate{Mean: true}, OnPools: true, NoneWhenIdle: true},
	}, 15*time.Second)
	tests := []struct {
		pool, metric, selector string
		want                   endpointAnswer
	}{
		{"busy", "queue", "", endpointAnswer{Milli: 7000}},
		{"busy", "queue", "fairness_id=1", endpointAnswer{Milli: 4000}},
		{"busy", "latency", "", endpointAnswer{Milli: 3500}},
		{"idle", "queue", "", endpointAnswer{Milli: 0}},
		{"idle", "latency", "", endpointAnswer{NotFound: "has no series of this metric"}},
		{"down", "queue", "", endpointAnswer{NotFound: "no endpoint picker of this InferencePool has been read"}},
		{"busy", "waiting", "", endpointAnswer{NotFound: "waiting"}},
		{"busy", "ttft", "", endpointAnswer{Milli: 500}},
		// Nothing observed: 0, so that the HPA may scale down, or none.
		{"idle", "ttft", "", endpointAnswer{Milli: 0}},
		{"idle", "ttft-strict", "", endpointAnswer{NotFound: "no mean"}},
	}
	for _, tt := range tests {
		v := checkAnswer(t, c, "gw", tt.pool, cmInfo(InferencePoolResource, tt.metric), tt.selector, tt.want)
		if v != nil && (v.DescribedObject.Kind != "InferencePool" || v.DescribedObject.Name != tt.pool ||
			v.DescribedObject.APIVersion != "inference.networking.k8s.io/v1") {
			t.Errorf("%s %s: described object %+v", tt.pool, tt.metric, v.DescribedObject)
		}
	}
	// The same metric on the LeaderWorkerSets the pools front.
	checkAnswer(t, c, "gw", "vllm", cmInfo(LWSResource, "queue"), "", endpointAnswer{NotFound: "does not map pools"})
	fronts := c.WithPools(fronting{"vllm": {"busy"}, "both": {"busy", "idle"}, "lonely": {}, "broken": {"down"}})
	for _, tt := range []struct {
		lws, metric string
		want        endpointAnswer
	}{
		{"vllm", "queue", endpointAnswer{Milli: 7000}},
		{"both", "queue", endpointAnswer{Milli: 7000}}, // 7 + 0
		{"lonely", "queue", endpointAnswer{NotFound: "no InferencePool selects"}},
		{"ghost", "queue", endpointAnswer{NotFound: "not known"}},
		{"broken", "queue", endpointAnswer{NotFound: "InferencePool down has no value"}},
		{"both", "latency", endpointAnswer{NotFound: "InferencePool idle has no value"}},
	} {
		checkAnswer(t, fronts, "gw", tt.lws, cmInfo(LWSResource, tt.metric), "", tt.want)
	}
	var pools []string
	for _, m := range c.ListAllMetrics() {
		if m.GroupResource == InferencePoolResource {
			pools = append(pools, m.Metric)
		}
	}
	if diff := cmp.Diff([]string{"latency", "queue", "ttft", "ttft-strict"}, pools); diff != "" {
		t.Errorf("metrics listed on InferencePools (-want +got):\n%s", diff)
	}
}

// fronting is a PoolFronts of fixed answers; a LeaderWorkerSet it does not
// hold is not known.
type fronting map[string][]string

func (f fronting) Fronting(_, lws string) ([]string, bool) {
	pools, ok := f[lws]
	return pools, ok
}
