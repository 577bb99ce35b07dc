// Package group knows LeaderWorkerSet groups: which pods form a group, what
// each pod requests as the HPA counts it, and how a group's usage is
// reported on its leader under each policy.
package group

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// IndexFunc indexes pods by group Key, for cache.Indexers.
func IndexFunc(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if key, ok := Key(pod); ok {
		return []string{key}, nil
	}
	return nil, nil
}

// PolicyOf returns the leader's policy: its annotation, or def when it has
// none or an unknown one.
func PolicyOf(leader *corev1.Pod, def Policy) Policy {
	if p, err := ParsePolicy(leader.Annotations[AnnotationPolicy]); err == nil {
		return p
	}
	return def
}

// Request returns the pod's request for r as the HPA counts it: the
// pod-level request when the pod sets any pod-level request, else the sum
// over its containers and restartable init containers, all of which must
// request r. CPU is in millicores, memory in bytes. ok is false when the
// HPA would find the request missing.
func Request(pod *corev1.Pod, r corev1.ResourceName) (value int64, ok bool) {
	if res := pod.Spec.Resources; res != nil && podLevelSet(res.Requests) {
		q, ok := res.Requests[r]
		if !ok {
			return 0, false
		}
		return quantity(q, r), true
	}
	var sum int64
	counted := 0
	add := func(c *corev1.Container) bool {
		q, ok := c.Resources.Requests[r]
		sum += quantity(q, r)
		counted++
		return ok
	}
	for i := range pod.Spec.Containers {
		if !add(&pod.Spec.Containers[i]) {
			return 0, false
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways && !add(c) {
			return 0, false
		}
	}
	return sum, counted > 0
}

// ContainerRequest returns the request of the named container for r, in
// Request's units.
func ContainerRequest(pod *corev1.Pod, container string, r corev1.ResourceName) (int64, bool) {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == container {
				q, ok := cs[i].Resources.Requests[r]
				if !ok {
					return 0, false
				}
				return quantity(q, r), true
			}
		}
	}
	return 0, false
}

func podLevelSet(reqs corev1.ResourceList) bool {
	_, cpu := reqs[corev1.ResourceCPU]
	_, mem := reqs[corev1.ResourceMemory]
	return cpu || mem
}

func quantity(q resource.Quantity, r corev1.ResourceName) int64 {
	if r == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}
