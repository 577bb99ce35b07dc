// Package podvalues keeps the latest values of the pod-endpoint source
// (pkg/sources/promscrape) and runs that source on its own ticker. The
// provider reads the values to serve them on custom.metrics.k8s.io.
//
// The store holds one entry per pod that had a value in a recent
// collection, each with at most one value per configured metric: it is
// bounded by the pods the source scrapes or exporters attribute. An entry
// goes when it has not been refreshed for StaleAfter (its target failing or
// its series gone) or when its pod leaves the pod cache or is replaced by
// another pod of the same name (the sweep at each update). Values are kept
// with the UID of the pod they were collected for, and served only to that
// pod: a LeaderWorkerSet recreates a group's pods under their old names,
// and the new pods must not show the old ones' load.
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
	// PodUID returns the UID of the cached pod namespace/name, and
	// whether there is one. An entry of a pod that is not cached, or was
	// collected for another UID, is dropped at the next update. Nil keeps
	// every entry until it is stale.
	PodUID func(namespace, name string) (string, bool)
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
	// uid is the UID of the pod the values were collected for, "" if
	// unknown.
	uid string
	// values are sorted by metric name (promscrape.Batch's order).
	values    []promscrape.Value
	collected time.Time
}

// forOtherPod says whether the entry was collected for another pod than
// the one of UID uid; an unknown UID on either side matches.
func (e entry) forOtherPod(uid string) bool { return e.uid != "" && uid != "" && e.uid != uid }

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
		s.pods[podKey{p.Namespace, p.Name}] = entry{uid: p.UID, values: p.Values, collected: now}
	}
	for k, e := range s.pods {
		if now.Sub(e.collected) > s.cfg.StaleAfter || s.podGone(k, e) {
			delete(s.pods, k)
		}
	}
	storedPods.Set(float64(len(s.pods)))
}

// podGone says whether the entry's pod left the cache or was replaced.
func (s *Store) podGone(k podKey, e entry) bool {
	if s.cfg.PodUID == nil {
		return false
	}
	uid, ok := s.cfg.PodUID(k.namespace, k.name)
	return !ok || e.forOtherPod(uid)
}

// Value returns the latest value of the served metric name of the pod
// namespace/name whose UID is uid ("" for any), and whether it has one
// that is not stale. The Value is shared: read only.
func (s *Store) Value(namespace, name, uid, metric string) (promscrape.Value, bool) {
	s.mu.RLock()
	e, ok := s.pods[podKey{namespace, name}]
	s.mu.RUnlock()
	if !ok || e.forOtherPod(uid) || s.cfg.Clock.Since(e.collected) > s.cfg.StaleAfter {
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
