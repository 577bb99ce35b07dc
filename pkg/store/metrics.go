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
	// Children are looked up on each use: those of a vector made before it
	// was registered would stay no-ops.
	if n2 != n {
		storedPoints.WithLabelValues("node").Add(float64(n2 - n))
	}
	if c2 != c {
		storedPoints.WithLabelValues("container").Add(float64(c2 - c))
	}
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
