package podcache

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AnnotationPrefix marks the pod annotations the server reads; every other
// annotation is dropped from the pod cache but IgnoreAnnotation.
const AnnotationPrefix = "group-metrics-server.io/"

// IgnoreAnnotation lists, comma-separated, the containers of a pod that
// kraftlet runs no instance for; the ukpd source reads it.
const IgnoreAnnotation = "cloud.unikraft.v1.instances/ignore"

// TrimPod is the pod informer's transform: it turns a *corev1.Pod into
// the *Pod the cache stores (NewPod), which keeps identity, labels, the
// annotations the server reads, node, phase, start time, the Ready
// condition, the names of the containers and of the sidecars that run, and
// the requests as the HPA counts them. Anything else passes through
// (tombstones and the like).
func TrimPod(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return NewPod(p), nil
	}
	return obj, nil
}

// TrimNode is the node informer's transform: a *corev1.Node becomes the
// *Node the cache stores (NewNode).
func TrimNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		return NewNode(n), nil
	}
	return obj, nil
}

func ownAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, AnnotationPrefix) || k == IgnoreAnnotation {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
