package sources

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const metricsNamespace = "group_metrics_server"

var (
	scrapeDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      metricsNamespace,
		Subsystem:      "scraper",
		Name:           "target_duration_seconds",
		Help:           "Time to scrape one target, by source.",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})
	scrapeFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      "scraper",
		Name:           "target_failures_total",
		Help:           "Failed scrapes of a target, by source and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source", "reason"})
	partialScrapes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      "scraper",
		Name:           "partial_scrapes_total",
		Help:           "Scrapes that succeeded but left out some points because they were malformed, by source.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})
	cycleDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      metricsNamespace,
		Subsystem:      "scraper",
		Name:           "cycle_duration_seconds",
		Help:           "Time from the start of a scrape tick until its last target finished.",
		Buckets:        []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30},
		StabilityLevel: metrics.ALPHA,
	})
	targetsGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      "scraper",
		Name:           "targets",
		Help:           "Targets in the last scrape tick, by source and state (healthy, failing).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source", "state"})
	earlyScrapes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      "scraper",
		Name:           "early_scrapes_total",
		Help:           "Scrapes of a target outside the ticks, after a pod started on one of its nodes, by source.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})
	overruns = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      "scraper",
		Name:           "target_overruns_total",
		Help:           "Scrapes of a target still running past their timeout, which the tick stopped waiting for, by source.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})
	lastTick = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      "scraper",
		Name:           "last_tick_timestamp_seconds",
		Help:           "Unix time at which the last scrape tick finished.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

// RegisterMetrics registers the scraper's self-metrics with the legacy
// registry served on /metrics. It is safe to call more than once.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(scrapeDuration, scrapeFailures, partialScrapes, cycleDuration, targetsGauge, earlyScrapes, overruns, lastTick)
	})
}
