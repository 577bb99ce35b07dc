package group

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
			if got != tc.want {
				t.Errorf("IgnoresCPU = %v (%q), want %v", got, why, tc.want)
			}
			if got && why == "" {
				t.Error("ignored without a reason")
			}
		})
	}
}
