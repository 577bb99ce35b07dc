package provider

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// AnnotationPrefix marks the pod annotations the server reads; every other
// annotation is dropped from the pod cache.
const AnnotationPrefix = "group-metrics-server.io/"

// TrimPod is an informer transform that keeps only what the provider reads
// of a pod: identity, labels, its own annotations, node, what the HPA counts
// as its requests (container, init container and pod-level requests,
// overhead), and what the HPA's readiness rule reads (phase, start time,
// the Ready condition and its last transition) with which sidecars are
// running. A cache of trimmed pods is a fraction of the size of full ones.
func TrimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // tombstones and the like pass through
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              p.Name,
			Namespace:         p.Namespace,
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			Labels:            p.Labels,
			Annotations:       ownAnnotations(p.Annotations),
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{
			NodeName:       p.Spec.NodeName,
			Containers:     trimContainers(p.Spec.Containers),
			InitContainers: trimContainers(p.Spec.InitContainers),
			Resources:      trimResources(p.Spec.Resources),
			Overhead:       p.Spec.Overhead,
		},
		Status: corev1.PodStatus{
			Phase:                 p.Status.Phase,
			StartTime:             p.Status.StartTime,
			Conditions:            readyOnly(p.Status.Conditions),
			InitContainerStatuses: runningSidecars(p),
		},
	}
	return out, nil
}

// readyOnly keeps the Ready condition, its status and last transition.
func readyOnly(in []corev1.PodCondition) []corev1.PodCondition {
	for _, c := range in {
		if c.Type == corev1.PodReady {
			return []corev1.PodCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	return nil
}

// runningSidecars keeps the names of the restartable init containers that
// are running, each with an empty running state: a sidecar that runs has
// usage like any container.
func runningSidecars(p *corev1.Pod) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, st := range p.Status.InitContainerStatuses {
		if st.State.Running == nil {
			continue
		}
		for i := range p.Spec.InitContainers {
			if c := &p.Spec.InitContainers[i]; c.Name == st.Name && group.IsSidecar(c) {
				out = append(out, corev1.ContainerStatus{Name: st.Name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
			}
		}
	}
	return out
}

func ownAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, AnnotationPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// trimContainers keeps names, restart policies and requests. Init
// containers that are not sidecars are kept too: a pod-level request leaves
// the other resources to resourcehelpers.PodRequests, which counts them.
func trimContainers(in []corev1.Container) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, 0, len(in))
	for i := range in {
		c := &in[i]
		out = append(out, corev1.Container{
			Name:          c.Name,
			RestartPolicy: c.RestartPolicy,
			Resources:     corev1.ResourceRequirements{Requests: c.Resources.Requests},
		})
	}
	return out
}

func trimResources(r *corev1.ResourceRequirements) *corev1.ResourceRequirements {
	if r == nil || len(r.Requests) == 0 {
		return nil
	}
	return &corev1.ResourceRequirements{Requests: r.Requests}
}

// TrimNode is an informer transform that keeps what the server reads of a
// node: identity, labels, addresses and the kubelet port.
func TrimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:            n.Name,
			UID:             n.UID,
			ResourceVersion: n.ResourceVersion,
			Labels:          n.Labels,
		},
		Status: corev1.NodeStatus{
			Addresses:       n.Status.Addresses,
			DaemonEndpoints: n.Status.DaemonEndpoints,
		},
	}, nil
}
