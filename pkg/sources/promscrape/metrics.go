package promscrape

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Self-metrics, named as pkg/sources names its own
// (group_metrics_server_<subsystem>_<name>), labelled by target kind (pod,
// exporter) and never by pod.
var (
	refusedTargets = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "group_metrics_server",
		Subsystem: "endpoints",
		Name:      "refused_targets_total",
		Help: "Pods refused as targets at a collection, by kind and reason (exporter_namespace, " +
			"exporter_service_account, host_network).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "reason"})
	droppedSamples = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "group_metrics_server",
		Subsystem: "endpoints",
		Name:      "dropped_samples_total",
		Help: "Samples read but not kept, by kind and reason (unknown_pod, other_node, own_target, " +
			"out_of_range).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "reason"})

	registerOnce sync.Once
)

// RegisterMetrics registers the source's self-metrics with the legacy
// registry served on /metrics. It is safe to call more than once.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(refusedTargets, droppedSamples)
	})
}
