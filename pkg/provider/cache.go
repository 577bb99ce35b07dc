package provider

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationPrefix marks the pod annotations the server reads; every other
// annotation is dropped from the pod cache.
const AnnotationPrefix = "group-metrics-server.io/"

// TrimPod is an informer transform that keeps only what the provider reads
// of a pod: identity, labels, its own annotations, node, phase and resource
// requests. A cache of trimmed pods is a fraction of the size of full ones.
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
			Containers:     trimContainers(p.Spec.Containers, false),
			InitContainers: trimContainers(p.Spec.InitContainers, true),
			Resources:      trimResources(p.Spec.Resources),
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
	return out, nil
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

// trimContainers keeps names and requests. Of init containers only the
// restartable ones (sidecars) run alongside the app, so only they are kept.
func trimContainers(in []corev1.Container, init bool) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, 0, len(in))
	for i := range in {
		c := &in[i]
		if init && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
			continue
		}
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
