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

// ScrapeAnnotationPrefix marks the annotations by which a pod asks the
// pod-endpoint source (pkg/sources/promscrape) to scrape it; they are kept.
const ScrapeAnnotationPrefix = "metrics.group-metrics-server.io/"

// ResourceMetricsPathAnnotation names, on a node, the path its kubelet
// serves its resource metrics at in place of /metrics/resource: metrics-server
// honours it (sigs.k8s.io/metrics-server v0.8.0
// pkg/scraper/client/resource/client.go, AnnotationResourceMetricsPath), and
// kwok's simulated nodes are given it to be read at kwok's metrics service.
// The node cache keeps it; the kubelet source reads it when it reads that
// endpoint.
const ResourceMetricsPathAnnotation = "metrics.k8s.io/resource-metrics-path"

// prometheusAnnotations are the conventional prometheus.io/* scrape
// annotations, which the pod-endpoint source honours when configured to
// (promscrape's PodTargets.PrometheusAnnotations): only these four keys are
// kept, not the whole prefix.
var prometheusAnnotations = map[string]bool{
	"prometheus.io/scrape": true, "prometheus.io/port": true, "prometheus.io/path": true, "prometheus.io/scheme": true,
}

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
// *Node the cache stores (NewNode), which keeps identity, labels,
// ResourceMetricsPathAnnotation, addresses and the kubelet port.
func TrimNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		return NewNode(n), nil
	}
	return obj, nil
}

func ownAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, AnnotationPrefix) || strings.HasPrefix(k, ScrapeAnnotationPrefix) ||
			k == IgnoreAnnotation || prometheusAnnotations[k] {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
