package podvalues

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	storedPods = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "endpoints",
		Name:           "pods",
		Help:           "Pods with values from pod endpoints or node exporters held for custom.metrics.k8s.io.",
		StabilityLevel: metrics.ALPHA,
	})
	tickDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "endpoints",
		Name:           "tick_duration_seconds",
		Help:           "Time to collect every pod endpoint and node exporter once.",
		Buckets:        []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		StabilityLevel: metrics.ALPHA,
	})
	lastTick = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "endpoints",
		Name:           "last_tick_timestamp_seconds",
		Help:           "When the last collection of pod endpoints and node exporters ended, in seconds since the epoch.",
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
)

// RegisterMetrics registers the loop's and store's self-metrics with the
// legacy registry; safe to call more than once.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(storedPods, tickDuration, lastTick) })
}
