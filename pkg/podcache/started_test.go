package podcache

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestStartedPods(t *testing.T) {
	pod := func(node string, phase corev1.PodPhase) *Pod {
		return NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}})
	}
	var got []string
	h := startedPods(func(node string) { got = append(got, node) }).(cache.ResourceEventHandlerDetailedFuncs)

	h.AddFunc(pod("n1", corev1.PodRunning), true)  // initial list: the first tick covers it
	h.AddFunc(pod("n2", corev1.PodRunning), false) // created running
	h.AddFunc(pod("n3", corev1.PodPending), false)
	h.AddFunc(pod("", corev1.PodRunning), false)
	h.UpdateFunc(pod("n4", corev1.PodPending), pod("n4", corev1.PodRunning)) // starts
	h.UpdateFunc(pod("n5", corev1.PodRunning), pod("n5", corev1.PodRunning)) // already running
	h.UpdateFunc(pod("n6", corev1.PodRunning), pod("n6", corev1.PodSucceeded))
	h.UpdateFunc(cache.DeletedFinalStateUnknown{}, pod("n7", corev1.PodRunning))

	if want := []string{"n2", "n4", "n7"}; !slices.Equal(got, want) {
		t.Errorf("soon called for %v, want %v", got, want)
	}
}
