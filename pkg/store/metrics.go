package store

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	storedPoints = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "group_metrics_server",
		Subsystem:      "store",
		Name:           "points",
		Help:           "Series held in the store, by kind (node, container).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	nodePoints      = storedPoints.WithLabelValues("node")
	containerPoints = storedPoints.WithLabelValues("container")

	registerOnce sync.Once
)

// RegisterMetrics registers the store's self-metrics; safe to call twice.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(storedPoints) })
}

// pointsDelta moves the stored-points gauges from old to new.
func pointsDelta(old, new *shard) {
	n, c := old.counts()
	n2, c2 := new.counts()
	nodePoints.Add(float64(n2 - n))
	containerPoints.Add(float64(c2 - c))
}

func (sh *shard) counts() (nodes, containers int) {
	if sh == nil {
		return 0, 0
	}
	if sh.node != nil {
		nodes = 1
	}
	for _, p := range sh.pods {
		containers += len(p.containers)
	}
	return nodes, containers
}
