//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/test/lws"
)

// The LeaderWorkerSet of TestLeaderWorkerSetController.
const (
	sampleNamespace = "e2e-lws-controller"
	sampleLWS       = "sample"
	sampleGroupSize = 4
	// sampleBound bounds each wait for the controller's work: the LWS and
	// StatefulSet controllers, kube-scheduler and kwok on a loaded machine.
	sampleBound = 2 * time.Minute
)

// TestLeaderWorkerSetController checks the LeaderWorkerSet controller the
// LWS tests share (installed once, by the first test that needs it).
func TestLeaderWorkerSetController(t *testing.T) {
	ctx := begin(t, 5*time.Minute)
	e := newLWSEnv(ctx, t)
	t.Logf("lws controller from %s, webhooks at %s", lwsController.ctrl.ModuleDir(), lwsController.ctrl.WebhookURL())
	newNamespace(ctx, t, sampleNamespace)

	leaderAnnotations := map[string]string{group.AnnotationPolicy: string(group.PolicyGroup)}
	obj := lws.NewLeaderWorkerSet(sampleNamespace, sampleLWS, 2, sampleGroupSize, "250m", leaderAnnotations)
	began := time.Now()
	if _, err := e.dyn.Resource(lws.GroupVersionResource).Namespace(sampleNamespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create LeaderWorkerSet: %v", err)
	}
	checkSampleGroups(t, waitSampleGroups(ctx, t, e, 2), 2, leaderAnnotations)
	t.Logf("2 groups of %d pods Running %v after creating the LeaderWorkerSet", sampleGroupSize, since(began))

	scale := waitSampleScale(ctx, t, e, 2)
	wantSelector := lws.NameLabel + "=" + sampleLWS + "," + lws.WorkerIndexLabel + "=0"
	t.Logf("scale subresource: spec.replicas=%d status.replicas=%d status.selector=%q",
		scale.Spec.Replicas, scale.Status.Replicas, scale.Status.Selector)
	if scale.Status.Selector != wantSelector {
		t.Errorf("scale selector = %q, want %q", scale.Status.Selector, wantSelector)
	}

	began = time.Now()
	if _, _, err := suite.cluster.Kubectl(ctx, "scale", "-n", sampleNamespace, "lws/"+sampleLWS, "--replicas=3"); err != nil {
		t.Fatal(err)
	}
	checkSampleGroups(t, waitSampleGroups(ctx, t, e, 3), 3, leaderAnnotations)
	t.Logf("scale to 3: the third group's %d pods Running %v after kubectl scale", sampleGroupSize, since(began))
	if scale = waitSampleScale(ctx, t, e, 3); scale.Spec.Replicas != 3 {
		t.Errorf("scale spec.replicas = %d after scaling, want 3", scale.Spec.Replicas)
	}
}

// waitSampleGroups waits until the LeaderWorkerSet has exactly
// groups*sampleGroupSize pods, all Running, and returns them.
func waitSampleGroups(ctx context.Context, t *testing.T, e *lwsEnv, groups int) []corev1.Pod {
	t.Helper()
	want := groups * sampleGroupSize
	var pods []corev1.Pod
	must(t, e.poll(ctx, sampleBound, fmt.Sprintf("%d Running pods", want), func(ctx context.Context) error {
		list, err := suite.cluster.Client().CoreV1().Pods(sampleNamespace).List(ctx, metav1.ListOptions{LabelSelector: lws.PodSelector(sampleLWS)})
		if err != nil {
			return err
		}
		pods = list.Items
		running := len(slices.DeleteFunc(slices.Clone(pods), func(p corev1.Pod) bool {
			return p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil
		}))
		if len(pods) != want || running != want {
			return fmt.Errorf("%d pods, %d Running", len(pods), running)
		}
		return nil
	}))
	return pods
}

// checkSampleGroups checks the LWS labels: group indexes 0..groups-1, worker
// indexes 0..sampleGroupSize-1 in each group, one group key per group and a
// different one for each group, and leaderAnnotations on leaders only.
func checkSampleGroups(t *testing.T, pods []corev1.Pod, groups int, leaderAnnotations map[string]string) {
	t.Helper()
	want, indexes := map[string][]string{}, map[string][]string{} // worker indexes by group index
	for g := range groups {
		for w := range sampleGroupSize {
			want[strconv.Itoa(g)] = append(want[strconv.Itoa(g)], strconv.Itoa(w))
		}
	}
	keys, names := map[string]map[string]bool{}, map[string][]string{} // by group index
	for _, p := range pods {
		l := p.Labels
		if l[lws.NameLabel] != sampleLWS {
			t.Errorf("pod %s: %s=%q", p.Name, lws.NameLabel, l[lws.NameLabel])
		}
		gi, wi, key := l[lws.GroupIndexLabel], l[lws.WorkerIndexLabel], l[lws.GroupKeyLabel]
		if gi == "" || wi == "" || key == "" {
			t.Errorf("pod %s lacks a group label: %v", p.Name, l)
			continue
		}
		indexes[gi] = append(indexes[gi], wi)
		if keys[gi] == nil {
			keys[gi] = map[string]bool{}
		}
		keys[gi][key] = true
		names[gi] = append(names[gi], p.Name)
		for k, v := range leaderAnnotations {
			if got, ok := p.Annotations[k]; wi == "0" && got != v {
				t.Errorf("leader %s: annotation %s=%q, want %q", p.Name, k, got, v)
			} else if wi != "0" && ok {
				t.Errorf("worker %s has the leader annotation %s", p.Name, k)
			}
		}
	}
	for _, workers := range indexes {
		slices.Sort(workers) // single digits: sampleGroupSize is 4
	}
	if diff := cmp.Diff(want, indexes); diff != "" {
		t.Errorf("worker indexes by group index (-want +got):\n%s", diff)
	}
	groupOf := map[string]string{} // by group key
	for _, gi := range slices.Sorted(maps.Keys(keys)) {
		if len(keys[gi]) != 1 {
			t.Errorf("group %s has group keys %v, want one", gi, slices.Sorted(maps.Keys(keys[gi])))
		}
		for key := range keys[gi] {
			if other, dup := groupOf[key]; dup {
				t.Errorf("groups %s and %s share group key %s", other, gi, key)
			}
			groupOf[key] = gi
		}
		t.Logf("group %s (key %v): %v", gi, slices.Sorted(maps.Keys(keys[gi])), names[gi])
	}
}

// waitSampleScale waits until the scale subresource reports replicas groups
// both wanted and created and a selector, and returns it.
func waitSampleScale(ctx context.Context, t *testing.T, e *lwsEnv, replicas int32) *autoscalingv1.Scale {
	t.Helper()
	var scale *autoscalingv1.Scale
	what := fmt.Sprintf("the scale subresource to report %d replicas", replicas)
	must(t, e.poll(ctx, sampleBound, what, func(ctx context.Context) (err error) {
		scale, err = lws.GetScale(ctx, e.dyn, sampleNamespace, sampleLWS)
		if err == nil && (scale.Spec.Replicas != replicas || scale.Status.Replicas != replicas || scale.Status.Selector == "") {
			err = fmt.Errorf("spec.replicas %d, status.replicas %d, selector %q", scale.Spec.Replicas, scale.Status.Replicas, scale.Status.Selector)
		}
		return err
	}))
	return scale
}
