package server

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
)

// TestEndpointPods: the pod cache as the pod-endpoint source lists it:
// Running pods with an IP and not being deleted, with the scrape
// annotations the cache keeps (its own and, when configured, the
// prometheus.io ones) and nothing else.
func TestEndpointPods(t *testing.T) {
	idx := podcache.NewPodIndex()
	pod := func(name string, phase corev1.PodPhase, ip string, ready bool, mutate func(*corev1.Pod)) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name),
				Labels: map[string]string{"app": "vllm"},
				Annotations: map[string]string{
					promscrape.AnnotationScrape: "true", promscrape.AnnotationPort: "8000",
					"prometheus.io/scrape": "true", "kubectl.kubernetes.io/last-applied-configuration": "{}",
				}},
			Spec:   corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: phase, PodIP: ip},
		}
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		if mutate != nil {
			mutate(p)
		}
		idx.Set(podcache.NewPod(p))
	}
	pod("ready", corev1.PodRunning, "10.0.0.1", true, nil)
	pod("unready", corev1.PodRunning, "10.0.0.2", false, nil)
	pod("no-ip", corev1.PodRunning, "", true, nil)
	pod("pending", corev1.PodPending, "10.0.0.3", false, nil)
	pod("deleting", corev1.PodRunning, "10.0.0.4", true, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} })

	annotations := map[string]string{promscrape.AnnotationScrape: "true", promscrape.AnnotationPort: "8000", "prometheus.io/scrape": "true"}
	want := []promscrape.Pod{
		{Namespace: "ml", Name: "ready", UID: "uid-ready", Labels: map[string]string{"app": "vllm"}, Annotations: annotations, IP: "10.0.0.1", Node: "n1", Running: true, Ready: true},
		{Namespace: "ml", Name: "unready", UID: "uid-unready", Labels: map[string]string{"app": "vllm"}, Annotations: annotations, IP: "10.0.0.2", Node: "n1", Running: true},
	}
	if diff := cmp.Diff(want, endpointPods{idx}.ListPods()); diff != "" {
		t.Errorf("ListPods (-want +got):\n%s", diff)
	}
}
