package ukpdrelay

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	requests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "group_metrics_server",
		Subsystem: "ukpd_relay",
		Name:      "requests_total",
		Help: "Requests the relay answered, by path (/v1/instances, /v1/instances/metrics, /metrics, other) and " +
			"HTTP status code; /healthz is not counted.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"path", "code"})
	upstreamDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "ukpd_relay",
		Name:           "upstream_request_duration_seconds",
		Help:           "Time from sending a request to ukpd to having read its answer, whatever the outcome, by path.",
		Buckets:        metrics.ExponentialBuckets(0.005, 2, 12),
		StabilityLevel: metrics.ALPHA,
	}, []string{"path"})

	registerOnce sync.Once
)

// registerMetrics registers the relay's self-metrics with the legacy
// registry served on /metrics. It is safe to call more than once.
func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(requests, upstreamDuration) })
}
