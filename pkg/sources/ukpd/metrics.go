package ukpd

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	ignoredInstances = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "group_metrics_server",
		Subsystem: "ukpd",
		Name:      "ignored_instances_total",
		Help: "Instances reported by ukpd but left out of a scrape, by reason (unknown_instance, not_running, " +
			"missing_tags, pod_not_found, ambiguous_pod, container_not_found, node_not_owned, duplicate_container, " +
			"missing_required_tag, implausible_usage, other_instance).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	tagConflicts = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "group_metrics_server",
		Subsystem: "ukpd",
		Name:      "tag_conflicts_total",
		Help: "Instances attributed by a pod's containerID whose kraftlet tags name another pod or container; " +
			"the containerID wins.",
		StabilityLevel: metrics.ALPHA,
	})
	listFetches = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "ukpd",
		Name:           "instance_list_fetches_total",
		Help:           "Fetches of the ukpd instance list, by trigger (initial, refresh, unknown_instance).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"trigger"})

	registerOnce sync.Once
)

// Triggers of an instance list fetch, the "trigger" label of
// group_metrics_server_ukpd_instance_list_fetches_total.
const (
	triggerInitial         = "initial"
	triggerRefresh         = "refresh"
	triggerUnknownInstance = "unknown_instance"
)

// RegisterMetrics registers the ukpd source's self-metrics with the legacy
// registry served on /metrics. It is safe to call more than once.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(ignoredInstances, tagConflicts, listFetches) })
}
