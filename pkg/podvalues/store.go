// Package podvalues keeps the latest values of the pod-endpoint source
// (pkg/sources/promscrape) and runs that source on its own ticker. The
// provider reads the values to serve them on custom.metrics.k8s.io.
//
// The store holds one entry per pod that had a value in a recent
// collection, each with at most one value per configured metric: it is
// bounded by the pods the source scrapes or exporters attribute. An entry
// goes when it has not been refreshed for StaleAfter (its target failing or
// its series gone) or when its pod leaves the pod cache (the sweep at each
// update).
package podvalues

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
)

// StoreConfig configures a Store.
type StoreConfig struct {
	Clock clock.PassiveClock
	// StaleAfter is how long a pod's values are served after the
	// collection that brought them; required.
	StaleAfter time.Duration
	// PodExists says whether the pod is still known; an entry of a pod
	// that is not is dropped at the next update. Nil keeps every entry
	// until it is stale.
	PodExists func(namespace, name string) bool
}

// Store is the latest values per pod. Safe for concurrent use: one
// writer (the loop), any number of readers.
type Store struct {
	cfg  StoreConfig
	mu   sync.RWMutex
	pods map[podKey]entry
}

type podKey struct{ namespace, name string }

type entry struct {
	// values are sorted by metric name (promscrape.Batch's order).
	values    []promscrape.Value
	collected time.Time
}

// NewStore returns an empty store.
func NewStore(cfg StoreConfig) *Store {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Store{cfg: cfg, pods: map[podKey]entry{}}
}

// Update takes a collection's batch: each pod in it gets the batch's values
// in place of its old ones. Pods not in it keep theirs until they are
// stale. Entries of pods that are gone or stale are dropped.
func (s *Store) Update(b promscrape.Batch) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range b.Pods {
		s.pods[podKey{p.Namespace, p.Name}] = entry{values: p.Values, collected: now}
	}
	for k, e := range s.pods {
		if now.Sub(e.collected) > s.cfg.StaleAfter || (s.cfg.PodExists != nil && !s.cfg.PodExists(k.namespace, k.name)) {
			delete(s.pods, k)
		}
	}
	storedPods.Set(float64(len(s.pods)))
}

// Value returns the pod's latest value of the served metric name, and
// whether it has one that is not stale. The Value is shared: read only.
func (s *Store) Value(namespace, name, metric string) (promscrape.Value, bool) {
	s.mu.RLock()
	e, ok := s.pods[podKey{namespace, name}]
	s.mu.RUnlock()
	if !ok || s.cfg.Clock.Since(e.collected) > s.cfg.StaleAfter {
		return promscrape.Value{}, false
	}
	for i := range e.values {
		if e.values[i].Metric == metric {
			return e.values[i], true
		}
	}
	return promscrape.Value{}, false
}

// Len is the number of pods held.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.pods)
}
