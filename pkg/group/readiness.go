package group

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Readiness is the HPA's rule for the CPU samples of pods that are not
// ready, or only just became ready. Its fields mean what
// kube-controller-manager's flags of the same names mean, and take their
// defaults.
type Readiness struct {
	// CPUInitializationPeriod (--horizontal-pod-autoscaler-cpu-initialization-period,
	// default 5m): after a pod starts, its CPU sample counts only while the
	// pod is Ready and the sample's window began after it became Ready.
	CPUInitializationPeriod time.Duration
	// InitialReadinessDelay (--horizontal-pod-autoscaler-initial-readiness-delay,
	// default 30s): after the initialization period, a pod that is not Ready
	// is ignored when its Ready condition last changed within this long of
	// its start, that is when it has never been Ready.
	InitialReadinessDelay time.Duration
}

// DefaultReadiness is kube-controller-manager's default.
var DefaultReadiness = Readiness{CPUInitializationPeriod: 5 * time.Minute, InitialReadinessDelay: 30 * time.Second}

// IgnoresCPU reports whether the HPA, at now, ignores the CPU sample of pod
// that ends at timestamp and spans window, and says why. It is the rule of
// groupPods in k8s.io/kubernetes v1.37.2
// pkg/controller/podautoscaler/replica_calculator.go for a Running pod with
// metrics, with the HPA's clock replaced by now.
func (r Readiness) IgnoresCPU(pod *corev1.Pod, timestamp time.Time, window time.Duration, now time.Time) (string, bool) {
	cond := readyCondition(pod)
	if cond == nil || pod.Status.StartTime == nil {
		return "it has no Ready condition or start time yet", true
	}
	start := pod.Status.StartTime.Time
	transition := cond.LastTransitionTime.Time
	if start.Add(r.CPUInitializationPeriod).After(now) {
		if cond.Status == corev1.ConditionFalse {
			return fmt.Sprintf("it is not Ready within %s of its start", r.CPUInitializationPeriod), true
		}
		if timestamp.Before(transition.Add(window)) {
			return fmt.Sprintf("its sample (%s over %s) does not begin after it became Ready at %s",
				timestamp.UTC().Format(time.RFC3339), window, transition.UTC().Format(time.RFC3339)), true
		}
		return "", false
	}
	if cond.Status == corev1.ConditionFalse && start.Add(r.InitialReadinessDelay).After(transition) {
		return "it is not Ready and has never been", true
	}
	return "", false
}

func readyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
