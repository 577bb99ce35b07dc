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
	targetDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "endpoints",
		Name:           "target_duration_seconds",
		Help:           "Time to scrape one pod endpoint or node exporter, by kind (pod, exporter).",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	targetFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "group_metrics_server",
		Subsystem: "endpoints",
		Name:      "target_failures_total",
		Help: "Failed scrapes of a pod endpoint or node exporter, by kind and reason (timeout, connection, tls, " +
			"http_status, too_large, decode, other).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "reason"})
	partialTargets = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "endpoints",
		Name:           "partial_scrapes_total",
		Help:           "Scrapes that succeeded but left out allow-listed series of the wrong type, by kind.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	seriesKept = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "endpoints",
		Name:           "series",
		Help:           "Allow-listed series read in the last tick, by kind.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
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
	overruns = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "endpoints",
		Name:           "overruns_total",
		Help:           "Scrapes not waited for because they overran their timeout by the grace, by kind.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})

	registerOnce sync.Once
)

// RegisterMetrics registers the source's self-metrics with the legacy
// registry served on /metrics. It is safe to call more than once.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(targetDuration, targetFailures, partialTargets, seriesKept,
			refusedTargets, droppedSamples, overruns)
	})
}
