package provider

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// seriesProvider has group 0 of "inf" (a leader and two workers, all with
// metrics) and group 1 (a leader without metrics), plus a pod outside any
// LeaderWorkerSet.
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
	usage := map[string]store.PodUsage{
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
		{Namespace: "ml", LeaderWorkerSet: "inf", Group: "0", CPUCores: 1.9, MemoryBytes: 4 * 256 << 20,
			CPUUtilization: 1.9 / 3, HasCPUUtilization: true, MemoryUtilization: 0.25, HasMemoryUtilization: true,
			Members: 3, Counted: 3},
		{Namespace: "ml", LeaderWorkerSet: "inf", Group: "1", Members: 1},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("GroupSamples (-want +got):\n%s", diff)
	}
	if got := New(Config{}).GroupSamples(); got != nil {
		t.Errorf("GroupSamples without a group index = %v, want nil", got)
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
	want := `
# HELP group_metrics_server_lws_group_cpu_usage_cores [ALPHA] CPU usage of a LeaderWorkerSet group's members that have metrics, in cores.
# TYPE group_metrics_server_lws_group_cpu_usage_cores gauge
group_metrics_server_lws_group_cpu_usage_cores` + labels + ` 1.9
# HELP group_metrics_server_lws_group_cpu_utilization [ALPHA] CPU usage over CPU requests of a LeaderWorkerSet group's members that have metrics and request CPU (0.7 = 70%).
# TYPE group_metrics_server_lws_group_cpu_utilization gauge
group_metrics_server_lws_group_cpu_utilization` + labels + ` 0.625
# HELP group_metrics_server_lws_group_members [ALPHA] Pods of a LeaderWorkerSet group known to the server.
# TYPE group_metrics_server_lws_group_members gauge
group_metrics_server_lws_group_members` + labels + ` 3
group_metrics_server_lws_group_members` + lone + ` 1
# HELP group_metrics_server_lws_group_members_counted [ALPHA] Pods of a LeaderWorkerSet group whose usage the group's values include.
# TYPE group_metrics_server_lws_group_members_counted gauge
group_metrics_server_lws_group_members_counted` + labels + ` 3
group_metrics_server_lws_group_members_counted` + lone + ` 0
# HELP group_metrics_server_lws_group_memory_usage_bytes [ALPHA] Working-set memory of a LeaderWorkerSet group's members that have metrics, in bytes.
# TYPE group_metrics_server_lws_group_memory_usage_bytes gauge
group_metrics_server_lws_group_memory_usage_bytes` + labels + ` 1.073741824e+09
# HELP group_metrics_server_lws_group_memory_utilization [ALPHA] Memory usage over memory requests of a LeaderWorkerSet group's members that have metrics and request memory (0.7 = 70%).
# TYPE group_metrics_server_lws_group_memory_utilization gauge
group_metrics_server_lws_group_memory_utilization` + labels + ` 0.25
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
