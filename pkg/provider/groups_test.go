package provider

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// groupMember is worker of group g of LWS lws in namespace ml, on n1.
func groupMember(lws, g, worker string, phase corev1.PodPhase) *corev1.Pod {
	name := lws + "-" + g
	if worker != "0" {
		name += "-" + worker
	}
	return testPod("ml", name, "n1", phase, map[string]string{
		group.LabelName: lws, group.LabelGroupIndex: g, group.LabelWorkerIndex: worker,
	})
}

// lwsPod is member worker of group 0 of LWS "inf", requesting cpu per
// container.
func lwsPod(worker string, policy string, containers map[string]string) *corev1.Pod {
	p := groupMember("inf", "0", worker, corev1.PodRunning)
	if policy != "" {
		p.Annotations = map[string]string{group.AnnotationPolicy: policy}
	}
	// Started and Ready an hour ago: the HPA counts its CPU.
	started := metav1.NewTime(now.Add(-time.Hour))
	p.Status.StartTime = &started
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: started}}
	for _, c := range []string{"main", "sidecar"} {
		cpu, ok := containers[c]
		if !ok {
			continue
		}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")},
		}})
	}
	return p
}

func containerUsage(cpu map[string]uint64) store.PodUsage {
	u := store.PodUsage{Timestamp: now, Window: 15 * time.Second}
	for _, c := range []string{"main", "sidecar"} {
		if v, ok := cpu[c]; ok {
			u.Containers = append(u.Containers, store.ContainerUsage{Name: c, Usage: store.Usage{Timestamp: now, Window: 15 * time.Second, CPUNanoCores: v, MemoryBytes: 256 << 20}})
		}
	}
	return u
}

func groupProvider(t *testing.T, leaderPolicy string, def group.Policy, withLeader bool) *Provider {
	t.Helper()
	pods := []*corev1.Pod{
		lwsPod("1", "", map[string]string{"main": "1"}),
		lwsPod("2", "", map[string]string{"main": "1"}),
	}
	if withLeader {
		pods = append(pods, lwsPod("0", leaderPolicy, map[string]string{"main": "750m", "sidecar": "250m"}))
	}
	usage := map[string]store.PodUsage{
		"ml/inf-0":   containerUsage(map[string]uint64{"main": 80_000_000, "sidecar": 20_000_000}), // 0.1 of 1 core
		"ml/inf-0-1": containerUsage(map[string]uint64{"main": 900_000_000}),
		"ml/inf-0-2": containerUsage(map[string]uint64{"main": 900_000_000}),
	}
	return newGroupProvider(pods, usage, def)
}

func newGroupProvider(pods []*corev1.Pod, usage map[string]store.PodUsage, def group.Policy) *Provider {
	return New(Config{
		Pods: podIndex(pods...), Nodes: podcache.NewNodeIndex(),
		Usage: &fakeUsage{pods: usage}, Clock: clocktesting.NewFakeClock(now), Groups: true, DefaultPolicy: def,
		Readiness: group.DefaultReadiness,
	})
}

func cpuMilli(l corev1.ResourceList) int64 { q := l[corev1.ResourceCPU]; return q.MilliValue() }

func TestGroupPolicies(t *testing.T) {
	tests := []struct {
		name, annotation                     string
		def                                  group.Policy
		wantMain, wantSidecar                int64 // millicores
		wantPolicy, wantCovered, wantMembers string
	}{
		// U = (0.1 + 0.9 + 0.9) / 3 cores requested = 0.6333…; × the
		// leader's 1 core = 633m in whole millicores, split 750:250 into
		// 474m and the remaining 159m.
		{name: "group by annotation", annotation: "group", def: group.PolicyPod, wantMain: 474, wantSidecar: 159, wantPolicy: "group", wantCovered: "3", wantMembers: "3"},
		{name: "group by default", def: group.PolicyGroup, wantMain: 474, wantSidecar: 159, wantPolicy: "group", wantCovered: "3", wantMembers: "3"},
		// max(0.1, 0.9, 0.9) = 0.9 of the leader's 1 core.
		{name: "group-max", annotation: "group-max", def: group.PolicyPod, wantMain: 675, wantSidecar: 225, wantPolicy: "group-max", wantCovered: "3", wantMembers: "3"},
		{name: "pod", annotation: "pod", def: group.PolicyGroup, wantMain: 80, wantSidecar: 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := groupProvider(t, tc.annotation, tc.def, true)
			m, err := p.GetPodMetrics(context.Background(), "ml", "inf-0")
			must(t, err)
			got := map[string]int64{}
			for _, c := range m.Containers {
				got[c.Name] = cpuMilli(c.Usage)
			}
			if diff := cmp.Diff(map[string]int64{"main": tc.wantMain, "sidecar": tc.wantSidecar}, got); diff != "" {
				t.Errorf("leader containers in millicores (-want +got):\n%s", diff)
			}
			if m.Annotations[group.AnnotationReportedPolicy] != tc.wantPolicy ||
				m.Annotations[group.AnnotationCovered] != tc.wantCovered ||
				m.Annotations[group.AnnotationMembers] != tc.wantMembers {
				t.Errorf("annotations = %v", m.Annotations)
			}
			// Workers always report their own usage.
			list, err := p.ListPodMetrics(context.Background(), "ml", labels.SelectorFromSet(labels.Set{group.LabelWorkerIndex: "1"}), fields.Everything())
			if err != nil || len(list) != 1 {
				t.Fatalf("worker list: %v, %v", list, err)
			}
			if got := cpuMilli(list[0].Containers[0].Usage); got != 900 || list[0].Annotations != nil {
				t.Errorf("worker reports %dm with %v, want its own 900m", got, list[0].Annotations)
			}
		})
	}
}

// The HPA's selector on an LWS picks leaders; the list path must aggregate
// exactly like get.
func TestGroupListMatchesGet(t *testing.T) {
	p := groupProvider(t, "group", group.PolicyPod, true)
	leaders := selector(t, group.LabelName+"=inf,"+group.LabelWorkerIndex+"=0")
	list, err := p.ListPodMetrics(context.Background(), "ml", leaders, fields.Everything())
	if err != nil || len(list) != 1 {
		t.Fatalf("leader list: %v, %v", list, err)
	}
	one, err := p.GetPodMetrics(context.Background(), "ml", "inf-0")
	must(t, err)
	if diff := cmp.Diff(one.Containers, list[0].Containers, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("list and get differ (-get +list):\n%s", diff)
	}
}

func TestWorkersOfAGoneLeader(t *testing.T) {
	p := groupProvider(t, "", group.PolicyGroup, false)
	list, err := p.ListPodMetrics(context.Background(), "ml", labels.Everything(), fields.Everything())
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("got %d pods, want the two workers with metrics", len(list))
	}
	for _, m := range list {
		if got := cpuMilli(m.Containers[0].Usage); got != 900 {
			t.Errorf("%s reports %dm, want its own 900m", m.Name, got)
		}
	}
}

func TestCustomMetrics(t *testing.T) {
	cm, ctx := groupProvider(t, "", group.PolicyPod, true).CustomMetrics(), context.Background()
	tests := []struct {
		name   string
		info   cmprovider.CustomMetricInfo
		object string
		want   string // "" wants NotFound
	}{
		// Pods with metrics: inf-0 (0.1 of 1 core), inf-0-1 and inf-0-2 (0.9
		// of 1 core each).
		{name: "LWS CPU utilization", info: cmInfo(LWSResource, MetricCPUUtilization), object: "inf", want: "633m"},
		{name: "LWS CPU usage", info: cmInfo(LWSResource, MetricCPUUsage), object: "inf", want: "1900m"},
		// 256Mi per container: two on the leader, one on each worker.
		{name: "LWS memory usage", info: cmInfo(LWSResource, MetricMemoryUsage), object: "inf", want: "1Gi"},
		// 1Gi used of 4Gi requested (1Gi per container) by pods with metrics.
		{name: "LWS memory utilization", info: cmInfo(LWSResource, MetricMemoryUtilization), object: "inf", want: "250m"},
		{name: "leader pod: its group", info: cmInfo(podsResource, MetricCPUUtilization), object: "inf-0", want: "633m"},
		{name: "worker pod", info: cmInfo(podsResource, MetricCPUUsage), object: "inf-0-1"},
		{name: "unknown LWS", info: cmInfo(LWSResource, MetricCPUUsage), object: "other"},
		{name: "unknown metric", info: cmInfo(LWSResource, "bogus"), object: "inf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := cm.GetMetricByName(ctx, types.NamespacedName{Namespace: "ml", Name: tc.object}, tc.info, labels.Everything())
			if tc.want == "" && !apierrors.IsNotFound(err) {
				t.Errorf("%v, want NotFound", err)
			} else if tc.want != "" && (err != nil || v.Value.String() != tc.want) {
				t.Errorf("value = %v (%v), want %s", v, err, tc.want)
			}
		})
	}
	if got := len(cm.ListAllMetrics()); got != 8 {
		t.Errorf("ListAllMetrics with LWS pods: %d metrics, want 8", got)
	}
	empty := newTestProvider(t)
	empty.groups = true // but no pod of a group
	if got := empty.CustomMetrics().ListAllMetrics(); len(got) != 0 {
		t.Errorf("ListAllMetrics without LWS pods = %v, want none", got)
	}
}

// TestCustomMetricsWithholdIncompleteGroups: the lws_group_* metrics follow
// the one group rule. A worker without metrics used to be left out of the
// sums, so the group read as less loaded than it was; now the leader's and
// the LeaderWorkerSet's values are absent, as for resource metrics.
func TestCustomMetricsWithholdIncompleteGroups(t *testing.T) {
	p := groupProvider(t, "", group.PolicyPod, true)
	delete(p.usage.(*fakeUsage).pods, "ml/inf-0-2")
	cm := p.CustomMetrics()
	for _, m := range metricNames {
		for _, object := range []cmprovider.CustomMetricInfo{cmInfo(LWSResource, m), cmInfo(podsResource, m)} {
			name := map[schema.GroupResource]string{LWSResource: "inf", podsResource: "inf-0"}[object.GroupResource]
			_, err := cm.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: name}, object, labels.Everything())
			if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "member inf-0-2 is missing") {
				t.Errorf("%s of %s: %v, want NotFound naming the missing member", m, name, err)
			}
		}
	}
}

func TestMilli(t *testing.T) {
	for in, want := range map[float64]int64{
		0.0004: 0, 0.0005: 1, -0.0015: -2, 2.5: 2500,
		1e16: math.MaxInt64, math.MaxFloat64: math.MaxInt64, -1e16: math.MinInt64,
	} {
		if got := milli(in); got != want {
			t.Errorf("milli(%g) = %d, want %d", in, got, want)
		}
	}
}

func cmInfo(gr schema.GroupResource, metric string) cmprovider.CustomMetricInfo {
	return cmprovider.CustomMetricInfo{GroupResource: gr, Namespaced: true, Metric: metric}
}

// TestCustomMetricsScopeAndSelector is finding 8: a root-scoped request for
// a namespaced metric summed same-named LeaderWorkerSets across
// namespaces, and metricLabelSelector was ignored.
func TestCustomMetricsScopeAndSelector(t *testing.T) {
	cm, ctx := groupProvider(t, "", group.PolicyPod, true).CustomMetrics(), context.Background()
	root := cmprovider.CustomMetricInfo{GroupResource: LWSResource, Namespaced: false, Metric: MetricCPUUsage}
	if _, err := cm.GetMetricByName(ctx, types.NamespacedName{Name: "inf"}, root, labels.Everything()); !apierrors.IsNotFound(err) {
		t.Errorf("root-scoped LWS: %v, want NotFound", err)
	}
	rootPods := cmprovider.CustomMetricInfo{GroupResource: podsResource, Namespaced: false, Metric: MetricCPUUsage}
	if _, err := cm.GetMetricBySelector(ctx, "", labels.Everything(), rootPods, labels.Everything()); !apierrors.IsNotFound(err) {
		t.Errorf("root-scoped pods: %v, want NotFound", err)
	}
	tests := []struct {
		name, selector string
		want           bool
	}{
		{name: "everything", selector: "", want: true},
		{name: "absent label", selector: "!shard", want: true},
		{name: "label required", selector: "shard=a", want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel := selector(t, tc.selector)
			_, err := cm.GetMetricByName(ctx, types.NamespacedName{Namespace: "ml", Name: "inf"}, cmInfo(LWSResource, MetricCPUUsage), sel)
			if (err == nil) != tc.want || (!tc.want && !apierrors.IsNotFound(err)) {
				t.Errorf("by name with %q: %v, want a value: %v, else NotFound", tc.selector, err, tc.want)
			}
			list, err := cm.GetMetricBySelector(ctx, "ml", labels.Everything(), cmInfo(podsResource, MetricCPUUsage), sel)
			must(t, err)
			if got := len(list.Items) == 1; got != tc.want {
				t.Errorf("by selector with %q: %d items, want a value: %v", tc.selector, len(list.Items), tc.want)
			}
		})
	}
}

// TestGroupCountsMembersAsTheHPA: a group-policy leader reports only when
// every member the HPA would count has metrics it would not ignore; a get
// then names the member and why, and a list leaves the leader out.
func TestGroupCountsMembersAsTheHPA(t *testing.T) {
	// readySince sets when the pod started and its Ready condition.
	readySince := func(started time.Duration, ready corev1.ConditionStatus, transition time.Duration) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			st := metav1.NewTime(now.Add(-started))
			p.Status.StartTime = &st
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.NewTime(now.Add(-transition))}}
		}
	}
	tests := []struct {
		name           string
		leader, worker func(p *corev1.Pod)
		noUsage        bool   // the store has no usage of the worker
		wantWhy        string // part of the leader's NotFound; "" wants wantCPU millicores on the leader
		wantCPU        int64
	}{
		{name: "ready worker counts", wantCPU: 550},
		// Finding 1: a worker loading its model at full CPU, Running but
		// not Ready, pushed the group's U up.
		{name: "worker not Ready within the initialization period", worker: readySince(time.Minute, corev1.ConditionFalse, time.Minute),
			wantWhy: "group member inf-0-1 is not ready as the HPA counts pods"},
		{name: "leader being deleted", leader: func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} },
			wantWhy: "the leader is ignored as the HPA counts pods"},
		// The HPA would ignore the leader's own CPU, and count its busy
		// workers; with the leader missing instead it counts the group
		// at 100% on a scale-down and 0% on a scale-up.
		{name: "leader not Ready", leader: readySince(time.Minute, corev1.ConditionFalse, time.Minute),
			wantWhy: "the leader is not ready as the HPA counts pods"},
		{name: "worker Ready, but not for one window yet", worker: readySince(2*time.Minute, corev1.ConditionTrue, 5*time.Second),
			wantWhy: "does not begin after it became Ready"},
		// Finding 2: a member without fresh metrics was left out, and U
		// was computed over the idle leader.
		{name: "worker without metrics", noUsage: true, wantWhy: "group member inf-0-1 has no metrics: node n1 did not report it"},
		{name: "worker Pending", worker: func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, wantWhy: "group member inf-0-1 is Pending"},
		// Finding 4, on the read side: a pod whose sidecar runs but has
		// no usage is not served, nor is its group.
		{name: "worker with a running sidecar without usage", worker: func(p *corev1.Pod) {
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: &always}}
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "proxy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		}, wantWhy: `group member inf-0-1 has no metrics: container "proxy" of the pod has no usage`},
		{name: "worker being deleted: the group is incomplete", worker: func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} },
			wantWhy: "group member inf-0-1 is being deleted"},
		{name: "worker failed: the group is incomplete", worker: func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed },
			wantWhy: "group member inf-0-1 has failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			leader, worker := lwsPod("0", "group", map[string]string{"main": "1"}), lwsPod("1", "", map[string]string{"main": "1"})
			for pod, change := range map[*corev1.Pod]func(*corev1.Pod){leader: tc.leader, worker: tc.worker} {
				if change != nil {
					change(pod)
				}
			}
			usage := map[string]store.PodUsage{"ml/inf-0": containerUsage(map[string]uint64{"main": 100_000_000})}
			if !tc.noUsage {
				usage["ml/inf-0-1"] = containerUsage(map[string]uint64{"main": 1_000_000_000})
			}
			p := newGroupProvider([]*corev1.Pod{leader, worker}, usage, group.PolicyPod)
			m, err := p.GetPodMetrics(context.Background(), "ml", "inf-0")
			list, lerr := p.ListPodMetrics(context.Background(), "ml", selector(t, group.LabelWorkerIndex+"=0"), fields.Everything())
			must(t, lerr)
			if tc.wantWhy != "" {
				if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), tc.wantWhy) {
					t.Fatalf("get: %v, want NotFound saying %q", err, tc.wantWhy)
				}
				if len(list) != 0 {
					t.Errorf("list has the leader: %v", list)
				}
				return
			}
			must(t, err)
			if got := cpuMilli(m.Containers[0].Usage); got != tc.wantCPU {
				t.Errorf("leader reports %dm, want %dm", got, tc.wantCPU)
			}
			if len(list) != 1 {
				t.Errorf("list: %d leaders, want 1", len(list))
			}
		})
	}
}

// TestLeaderWithPodLevelMemory is finding 3: a leader with a pod-level
// memory request and container CPU requests reported the group's total CPU
// (group size × the utilization), because its CPU request read as missing.
func TestLeaderWithPodLevelMemory(t *testing.T) {
	leader := lwsPod("0", "group", map[string]string{"main": "1"})
	leader.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}}
	pods := []*corev1.Pod{leader}
	usage := map[string]store.PodUsage{"ml/inf-0": containerUsage(map[string]uint64{"main": 500_000_000})}
	for _, w := range []string{"1", "2", "3"} {
		pods = append(pods, lwsPod(w, "", map[string]string{"main": "1"}))
		usage["ml/inf-0-"+w] = containerUsage(map[string]uint64{"main": 500_000_000})
	}
	p := newGroupProvider(pods, usage, group.PolicyPod)
	m, err := p.GetPodMetrics(context.Background(), "ml", "inf-0")
	must(t, err)
	// U = 2 cores / 4 cores = 0.5 on the leader's 1 core: 500m, read by the
	// HPA as 50%; the old rule reported the 2000m sum.
	if got := cpuMilli(m.Containers[0].Usage); got != 500 {
		t.Errorf("leader reports %dm, want 500m", got)
	}
}
