package apiserver

import (
	"context"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/metrics/pkg/apis/metrics"
)

// PodMetricsGetter answers for metrics.k8s.io pods. Implementations must be
// safe for concurrent use: every API request calls in on its own goroutine.
// CPU is in cores, memory in bytes, as resource quantities.
type PodMetricsGetter interface {
	// GetPodMetrics returns the metrics of one pod, or a NotFound
	// apierrors.StatusError whose message says why the pod has none.
	GetPodMetrics(ctx context.Context, namespace, name string) (*metrics.PodMetrics, error)
	// ListPodMetrics returns the metrics of the pods in namespace ("" for all
	// namespaces) that match both selectors (fields: metadata.name,
	// metadata.namespace). Pods without metrics are left out.
	ListPodMetrics(ctx context.Context, namespace string, labelSelector labels.Selector, fieldSelector fields.Selector) ([]metrics.PodMetrics, error)
}

// NodeMetricsGetter answers for metrics.k8s.io nodes, with the same contract
// as PodMetricsGetter.
type NodeMetricsGetter interface {
	GetNodeMetrics(ctx context.Context, name string) (*metrics.NodeMetrics, error)
	ListNodeMetrics(ctx context.Context, labelSelector labels.Selector, fieldSelector fields.Selector) ([]metrics.NodeMetrics, error)
}
