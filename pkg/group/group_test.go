package group

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// m is a member using cpu cores and mem bytes, requesting reqCPU cores and
// reqMem bytes; a negative request means none.
func m(cpu, mem, reqCPU, reqMem float64) Member {
	return Member{HasUsage: true, Usage: total(cpu, mem), Requests: Requests{Has: [2]bool{reqCPU >= 0, reqMem >= 0},
		Milli: [2]int64{int64(math.Round(max(reqCPU, 0) * 1e3)), int64(math.Round(max(reqMem, 0) * 1e3))}}}
}

// total is cpu cores and mem bytes as Usage.
func total(cpu, mem float64) Usage {
	return Usage{int64(math.Round(cpu * 1e9)), int64(math.Round(mem))}
}

func noMetrics(reqCPU, reqMem float64) Member {
	x := m(0, 0, reqCPU, reqMem)
	x.HasUsage = false
	return x
}

const gi = 1 << 30

func TestAggregate(t *testing.T) {
	tests := []struct {
		name    string
		policy  Policy
		members []Member // members[0] is the leader
		want    Result
	}{
		{name: "group: load on the workers only", policy: PolicyGroup, want: Result{Total: total(0.7, 1*gi), Covered: 4},
			// Leader idle at 0.1 of 1 core, three workers at 0.9 of 1 core:
			// U = 2.8 / 4 = 0.7, reported on the leader's 1 core.
			members: []Member{m(0.1, 1*gi, 1, 2*gi), m(0.9, 1*gi, 1, 2*gi), m(0.9, 1*gi, 1, 2*gi), m(0.9, 1*gi, 1, 2*gi)}},
		{name: "group-max: the bottleneck", policy: PolicyGroupMax, want: Result{Total: total(0.9, 1.5*gi), Covered: 3},
			members: []Member{m(0.1, 0.5*gi, 1, 2*gi), m(0.9, 1*gi, 1, 2*gi), m(0.3, 1.5*gi, 1, 2*gi)}},
		{name: "unequal requests weigh by request", policy: PolicyGroup, want: Result{Total: total(4.0/3, 1), Covered: 2},
			// Leader 0.5 of 2 cores, worker 1.5 of 1 core: U = 2 / 3, on 2 cores = 4/3.
			members: []Member{m(0.5, 1, 2, 1), m(1.5, 1, 1, 1)}},
		{name: "members without metrics are left out", policy: PolicyGroup, want: Result{Total: total(0.4, 1), Covered: 2},
			members: []Member{m(0.2, 1, 1, 1), noMetrics(1, 1), m(0.6, 1, 1, 1), noMetrics(1, 1)}},
		{name: "members without requests are left out of the ratio", policy: PolicyGroup, want: Result{Total: total(0.2, 2*gi), Covered: 2},
			// The worker without a CPU request counts for memory only.
			members: []Member{m(0.2, 1*gi, 1, 1*gi), m(5, 3*gi, -1, 1*gi)}},
		{name: "leader without a request reports the group's sum", policy: PolicyGroup, want: Result{Total: total(0.5, 3*gi), Covered: 2},
			members: []Member{m(0.2, 1*gi, -1, -1), m(0.3, 2*gi, 1, 1*gi), noMetrics(1, 1)}},
		// Finding 3: a zero request adds usage and no request, as in the
		// HPA's sums; it was left out as if missing.
		{name: "a member with a zero request adds its usage", policy: PolicyGroup, want: Result{Total: total(1, 1), Covered: 2},
			members: []Member{m(0.5, 1, 1, 1), m(0.5, 1, 0, 1)}},
		{name: "leader with a zero request reports the group's sum", policy: PolicyGroup, want: Result{Total: total(0.75, 1), Covered: 2},
			members: []Member{m(0.5, 1, 0, 1), m(0.25, 1, 1, 1)}},
		{name: "leader alone (group being created)", policy: PolicyGroup, want: Result{Total: total(0.25, 1*gi), Covered: 1},
			members: []Member{m(0.25, 1*gi, 0.5, 2*gi), noMetrics(0.5, 2*gi), noMetrics(0.5, 2*gi)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Aggregate(tc.policy, tc.members[0], tc.members)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Aggregate (-want +got):\n%s", diff)
			}
			// What the HPA computes from it: Total / leader request.
			if tc.members[0].Has[CPU] && tc.members[0].Milli[CPU] > 0 && tc.policy == PolicyGroup {
				var u, r int64
				for _, x := range tc.members {
					if x.HasUsage && x.Has[CPU] {
						u, r = u+x.Usage[CPU], r+x.Milli[CPU]
					}
				}
				// Within a nanocore of rounding over the leader's request.
				hpa, want := Utilization(CPU, got.Total[CPU], tc.members[0].Milli[CPU]), Utilization(CPU, u, r)
				if math.Abs(hpa-want) > 1e-9 {
					t.Errorf("HPA utilization %v, want the group's %v", hpa, want)
				}
			}
		})
	}
}

func TestSpread(t *testing.T) {
	tests := []struct {
		name    string
		total   int64
		weights []float64
		want    []int64
	}{
		{name: "by request", total: 700_000_000, weights: []float64{750, 250}, want: []int64{525_000_000, 175_000_000}},
		{name: "remainder to the last", total: 10, weights: []float64{1, 1, 1}, want: []int64{3, 3, 4}},
		{name: "all weights zero", total: 9, weights: []float64{0, 0, 0}, want: []int64{3, 3, 3}},
		{name: "one container", total: 42, weights: []float64{0}, want: []int64{42}},
		{name: "no containers", total: 42, weights: nil, want: []int64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Spread(tc.total, tc.weights)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Spread (-want +got):\n%s", diff)
			}
			var sum int64
			for _, p := range got {
				sum += p
			}
			if len(got) > 0 && sum != tc.total {
				t.Errorf("parts add up to %d, want %d", sum, tc.total)
			}
		})
	}
}

func req(cpu, mem string) corev1.ResourceRequirements {
	r := corev1.ResourceList{}
	if cpu != "" {
		r[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		r[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return corev1.ResourceRequirements{Requests: r}
}

// TestRequest: requests in the HPA's units (MilliValue), as its
// calculateRequests counts them.
func TestRequest(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	const milliGi = 1000 * gi
	podLevel := func(cpu, mem string) *corev1.ResourceRequirements { r := req(cpu, mem); return &r }
	tests := []struct {
		name     string
		spec     corev1.PodSpec
		cpu, mem int64 // -1: missing
	}{
		{name: "containers add up", cpu: 1000, mem: 2 * milliGi,
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: req("250m", "1Gi")}, {Name: "b", Resources: req("750m", "1Gi")}}}},
		{name: "restartable init containers count, others do not", cpu: 600, mem: milliGi + 64<<20*1000,
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "setup", Resources: req("4", "4Gi")}, {Name: "proxy", RestartPolicy: &always, Resources: req("100m", "64Mi")}},
				Containers:     []corev1.Container{{Name: "a", Resources: req("500m", "1Gi")}},
			}},
		{name: "one container without a request: missing, as the HPA sees it", cpu: -1, mem: 2 * milliGi,
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: req("250m", "1Gi")}, {Name: "b", Resources: req("", "1Gi")}}}},
		// Finding 3: an explicit zero was taken for a missing request.
		{name: "an explicit zero is a request of zero", cpu: 0, mem: milliGi,
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: req("0", "1Gi")}}}},
		{name: "overhead is not added to container requests, as the HPA does not", cpu: 500, mem: milliGi,
			spec: corev1.PodSpec{Overhead: req("250m", "64Mi").Requests, Containers: []corev1.Container{{Name: "a", Resources: req("500m", "1Gi")}}}},
		{name: "pod-level requests win", cpu: 2000, mem: milliGi,
			spec: corev1.PodSpec{Resources: podLevel("2", ""), Containers: []corev1.Container{{Name: "a", Resources: req("250m", "1Gi")}}}},
		// Finding 3: a pod-level memory request made the container CPU
		// requests "missing", and the leader reported the group's sum.
		{name: "pod-level memory, container CPU: CPU from the containers", cpu: 750, mem: 8 * milliGi,
			spec: corev1.PodSpec{Resources: podLevel("", "8Gi"), Containers: []corev1.Container{{Name: "a", Resources: req("500m", "")}, {Name: "b", Resources: req("250m", "")}}}},
		{name: "pod-level requests with overhead", cpu: 2100, mem: 5 * milliGi,
			spec: corev1.PodSpec{Resources: podLevel("2", "4Gi"), Overhead: req("100m", "1Gi").Requests, Containers: []corev1.Container{{Name: "a"}}}},
		{name: "pod-level memory, no container CPU request: missing", cpu: -1, mem: 4 * milliGi,
			spec: corev1.PodSpec{Resources: podLevel("", "4Gi"), Containers: []corev1.Container{{Name: "a"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: tc.spec}
			got := [2]int64{-1, -1}
			for i, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if v, ok := Request(pod, r); ok {
					got[i] = v
				}
			}
			if want := [2]int64{tc.cpu, tc.mem}; got != want {
				t.Errorf("CPU and memory requests = %v, want %v (-1: missing)", got, want)
			}
		})
	}
}

func TestKeyAndPolicy(t *testing.T) {
	leader := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lws-0",
		Labels:      map[string]string{LabelName: "lws", LabelGroupIndex: "0", LabelWorkerIndex: "0"},
		Annotations: map[string]string{AnnotationPolicy: "group-max"}}}
	worker := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lws-0-1",
		Labels: map[string]string{LabelName: "lws", LabelGroupIndex: "0", LabelWorkerIndex: "1"}}}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	answers := func(p *corev1.Pod, def Policy) string {
		k, ok := Key(p)
		return fmt.Sprintf("key %q %v, leader %v, policy %s", k, ok, IsLeader(p), PolicyOf(p.Annotations[AnnotationPolicy], def))
	}
	got := map[string]string{"leader": answers(leader, PolicyPod), "worker": answers(worker, PolicyGroup), "plain": answers(plain, PolicyPod)}
	leader.Annotations[AnnotationPolicy] = "bogus"
	got["bogus"] = answers(leader, PolicyPod)
	want := map[string]string{
		"leader": `key "ns/lws/0" true, leader true, policy group-max`,
		// A worker's key is its leader's; without an annotation, the default.
		"worker": `key "ns/lws/0" true, leader false, policy group`,
		"plain":  `key "" false, leader false, policy pod`,
		"bogus":  `key "ns/lws/0" true, leader true, policy pod`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Key, IsLeader and PolicyOf (-want +got):\n%s", diff)
	}
	if _, err := ParsePolicy("bogus"); err == nil {
		t.Error("ParsePolicy accepted bogus")
	}
}

// TestIgnoresCPU walks the branches of the HPA's groupPods readiness rule
// with kube-controller-manager's defaults (5m, 30s).
func TestIgnoresCPU(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const window = 15 * time.Second
	pod := func(startedAgo time.Duration, ready corev1.ConditionStatus, transitionAgo time.Duration) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if startedAgo >= 0 {
			st := metav1.NewTime(now.Add(-startedAgo))
			p.Status.StartTime = &st
		}
		if ready != "" {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.NewTime(now.Add(-transitionAgo))}}
		}
		return p
	}
	tests := []struct {
		name      string
		pod       *corev1.Pod
		sampleAgo time.Duration
		want      bool
	}{
		{name: "no Ready condition", pod: pod(time.Hour, "", 0), want: true},
		{name: "no start time", pod: pod(-1, corev1.ConditionTrue, time.Hour), want: true},
		// Finding 1: a worker loading its model, Running but not Ready.
		{name: "loading: not Ready within the initialization period", pod: pod(2*time.Minute, corev1.ConditionFalse, 2*time.Minute), want: true},
		{name: "just Ready: the sample's window began before", pod: pod(2*time.Minute, corev1.ConditionTrue, 10*time.Second), sampleAgo: 0, want: true},
		{name: "Ready one window before the sample", pod: pod(2*time.Minute, corev1.ConditionTrue, 20*time.Second), sampleAgo: 5 * time.Second, want: false},
		{name: "after the period, never Ready", pod: pod(10*time.Minute, corev1.ConditionFalse, 10*time.Minute-5*time.Second), want: true},
		{name: "after the period, unready again after having been Ready", pod: pod(10*time.Minute, corev1.ConditionFalse, time.Minute), want: false},
		{name: "after the period, Ready", pod: pod(10*time.Minute, corev1.ConditionTrue, 9*time.Minute), want: false},
		{name: "after the period, Ready a moment ago: counts", pod: pod(10*time.Minute, corev1.ConditionTrue, time.Second), want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			why, got := DefaultReadiness.IgnoresCPU(tc.pod, now.Add(-tc.sampleAgo), window, now)
			if got != tc.want || (got && why == "") {
				t.Errorf("IgnoresCPU = %v (%q), want %v, and a reason when ignored", got, why, tc.want)
			}
		})
	}
}
