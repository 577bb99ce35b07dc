// Package group knows LeaderWorkerSet groups: which pods form a group, what
// each pod requests as the HPA counts it, and how a group's usage is
// reported on its leader under each policy; and the rules by which several
// values become one (rule.go), a histogram's among them (histogram.go: the
// quantile estimate is written here rather than imported from Prometheus's
// promql package, whose module is the Prometheus server's whole dependency
// graph; test/monitoring holds it to promql.BucketQuantile).
package group

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcehelpers "k8s.io/component-helpers/resource"
)

// Labels that the LeaderWorkerSet controller sets on every pod it creates.
const (
	LabelName        = "leaderworkerset.sigs.k8s.io/name"
	LabelGroupIndex  = "leaderworkerset.sigs.k8s.io/group-index"
	LabelWorkerIndex = "leaderworkerset.sigs.k8s.io/worker-index"
	LabelGroupKey    = "leaderworkerset.sigs.k8s.io/group-key"
)

// Annotations this server reads and writes.
const (
	// AnnotationPolicy on a leader pod (set it in the LWS leader template)
	// chooses the group's policy.
	AnnotationPolicy = "group-metrics-server.io/group-policy"
	// AnnotationReportedPolicy on an aggregated PodMetrics names the policy
	// that produced it.
	AnnotationReportedPolicy = "group-metrics-server.io/policy"
	// AnnotationCovered counts the group's pods whose usage went into an
	// aggregated PodMetrics; AnnotationMembers counts the group's pods known
	// to the server.
	AnnotationCovered = "group-metrics-server.io/group-pods-covered"
	AnnotationMembers = "group-metrics-server.io/group-pods"
)

// Policy says what a leader reports.
type Policy string

const (
	// PolicyPod: every pod reports its own usage.
	PolicyPod Policy = "pod"
	// PolicyGroup: the leader reports U × its own request, U being the
	// group's Σusage / Σrequest.
	PolicyGroup Policy = "group"
	// PolicyGroupMax: like PolicyGroup with U the highest utilization of any
	// one pod of the group.
	PolicyGroupMax Policy = "group-max"
)

// Combine is the rule by which a leader under the policy combines its
// group's utilization: CombineRatio for PolicyGroup, CombineMaxRatio for
// PolicyGroupMax (PolicyPod combines nothing).
func (p Policy) Combine() Combine {
	if p == PolicyGroupMax {
		return CombineMaxRatio
	}
	return CombineRatio
}

// ParsePolicy accepts the policy names.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case PolicyPod, PolicyGroup, PolicyGroupMax:
		return p, nil
	}
	return "", fmt.Errorf("unknown group policy %q: want %s, %s or %s", s, PolicyPod, PolicyGroup, PolicyGroupMax)
}

// IndexName is the pod-cache index of group members, keyed by Key.
const IndexName = "lws-group"

// Key identifies a group: namespace, LWS name and group index. ok is false
// for a pod that is not part of a LeaderWorkerSet.
func Key(pod *corev1.Pod) (key string, ok bool) {
	name, idx := pod.Labels[LabelName], pod.Labels[LabelGroupIndex]
	if name == "" || idx == "" {
		return "", false
	}
	return pod.Namespace + "/" + name + "/" + idx, true
}

// IsLeader reports whether pod leads a LeaderWorkerSet group.
func IsLeader(pod *corev1.Pod) bool {
	_, ok := Key(pod)
	return ok && pod.Labels[LabelWorkerIndex] == "0"
}

// PolicyOf returns the policy a leader's AnnotationPolicy value names, or
// def when it is empty or unknown.
func PolicyOf(annotation string, def Policy) Policy {
	if p, err := ParsePolicy(annotation); err == nil {
		return p
	}
	return def
}

// Request returns the pod's request for r as the HPA's replica calculator
// counts it when no container is named (k8s.io/kubernetes v1.37.2,
// pkg/controller/podautoscaler/replica_calculator.go: calculateRequests,
// calculatePodLevelRequests, calculatePodRequestsFromContainers), in the
// HPA's units: the quantity's MilliValue (millicores; thousandths of a
// byte for memory). ok is false when the HPA would find the request
// missing and give up on the metric.
//
//   - A pod that sets a pod-level request (resourcehelpers.IsPodLevelRequestsSet,
//     the PodLevelResources feature, on by default since v1.34): what
//     resourcehelpers.PodRequests gives, so the pod-level value where set,
//     the aggregate of container requests otherwise, and spec.overhead on
//     top. Missing only when r is in none of them.
//   - Otherwise the sum over the containers and restartable init
//     containers, every one of which must request r. Overhead is not
//     added: the HPA does not add it on this path.
//
// An explicit request of zero is a request of zero, not a missing one.
func Request(pod *corev1.Pod, r corev1.ResourceName) (milli int64, ok bool) {
	if resourcehelpers.IsPodLevelRequestsSet(pod) {
		q, ok := resourcehelpers.PodRequests(pod, resourcehelpers.PodResourcesOptions{})[r]
		if !ok {
			return 0, false
		}
		return q.MilliValue(), true
	}
	var sum int64
	add := func(c *corev1.Container) bool {
		q, ok := c.Resources.Requests[r]
		sum += q.MilliValue()
		return ok
	}
	for i := range pod.Spec.Containers {
		if !add(&pod.Spec.Containers[i]) {
			return 0, false
		}
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; IsSidecar(c) && !add(c) {
			return 0, false
		}
	}
	return sum, true
}

// IsSidecar reports whether an init container is restartable: it runs
// alongside the pod's containers, and its requests count with theirs.
func IsSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}
