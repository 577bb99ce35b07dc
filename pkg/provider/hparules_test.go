package provider

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

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
		noUsage        bool // the store has no usage of the worker
		// wantWhy is part of the leader's NotFound message; "" wants a
		// value, wantCPU millicores on the leader.
		wantWhy string
		wantCPU int64
	}{
		{name: "ready worker counts", wantCPU: 550},
		// Finding 1: a worker loading its model at full CPU, Running but
		// not Ready, pushed the group's U up.
		{name: "worker not Ready within the initialization period", worker: readySince(time.Minute, corev1.ConditionFalse, time.Minute),
			wantWhy: "group member inf-0-1 is not ready as the HPA counts pods"},
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
			list, lerr := p.ListPodMetrics(context.Background(), "ml", labels.SelectorFromSet(labels.Set{group.LabelWorkerIndex: "0"}), fields.Everything())
			if lerr != nil {
				t.Fatal(lerr)
			}
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

// TestPartialPodNotServed: a pod is served only when every container its
// spec runs has usage (finding 4 on the read side; any source).
func TestPartialPodNotServed(t *testing.T) {
	pod := testPod("a", "two", "n1", corev1.PodRunning, nil)
	pod.Spec.Containers = []corev1.Container{{Name: "app"}, {Name: "log"}}
	u := usage(1, 1)
	u.Containers[0].Name = "app"
	p := newGroupProvider([]*corev1.Pod{pod}, map[string]store.PodUsage{"a/two": u}, group.PolicyPod)
	_, err := p.GetPodMetrics(context.Background(), "a", "two")
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `container "log"`) {
		t.Errorf("get: %v, want NotFound naming container log", err)
	}
	list, err := p.ListPodMetrics(context.Background(), "a", labels.Everything(), fields.Everything())
	must(t, err)
	if len(list) != 0 {
		t.Errorf("list = %v, want none", list)
	}
}
