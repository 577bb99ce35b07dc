package provider

import (
	"runtime"
	"sync"
	"time"
	"weak"

	"k8s.io/apimachinery/pkg/labels"
)

// A list without selectors (kubectl top pods, with -A or -n) is served
// from a snapshot of each namespace: its items joined once, then copied
// into every list until something they were made from changes. Joining
// at every read costs a look-up of each pod's usage, spread over a heap
// of hundreds of MB; a copy of the items is one sequential pass
// (docs/benchmarks.md). A snapshot holds while
//   - the namespace's pods are the same (podcache.Pods.Version),
//   - the store has taken no write (store.Store.Generation): every pod's
//     usage is what it was, and
//   - no item has turned stale (store.PodUsage.FreshUntil): the usage of
//     a pod can only go stale with time, never come back, so the set of
//     pods that report changes only when one of them stops.
//
// A namespace with a leader that reports for its group is joined at every
// read: what the leader reports depends on the time too (the HPA's
// readiness rule). The HPA's own lists carry a selector and are joined at
// every read from the label index, which gives the few pods they match.
//
// A snapshot is held weakly: it lives as long as a list uses it or until
// the next garbage collection, so the items, and the containers of
// samples the store has since replaced, are not kept for a list that may
// never come. The collection of a snapshot also removes its entry, so
// that a namespace deleted after it was listed leaves nothing behind.
type snapshots struct {
	mu          sync.Mutex
	byNamespace map[string]weak.Pointer[nsSnapshot]
}

// nsSnapshot is a namespace's list of every pod that reports, and what
// it was made from. Its items are shared and never modified.
type nsSnapshot struct {
	joined
	version    uint64 // the namespace's in the pod cache
	generation uint64 // the store's
}

func (s *snapshots) get(namespace string) *nsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.byNamespace[namespace]
	if !ok {
		return nil
	}
	v := w.Value()
	if v == nil {
		delete(s.byNamespace, namespace)
	}
	return v
}

func (s *snapshots) put(namespace string, v *nsSnapshot) {
	w := weak.Make(v)
	s.mu.Lock()
	if s.byNamespace == nil {
		s.byNamespace = map[string]weak.Pointer[nsSnapshot]{}
	}
	s.byNamespace[namespace] = w
	s.mu.Unlock()
	runtime.AddCleanup(v, s.drop, snapshotEntry{namespace, w})
}

// snapshotEntry names a snapshot's entry for its cleanup, which must not
// hold the snapshot itself.
type snapshotEntry struct {
	namespace string
	w         weak.Pointer[nsSnapshot]
}

// drop removes a collected snapshot's entry, unless a newer snapshot of
// the namespace has taken its place.
func (s *snapshots) drop(e snapshotEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byNamespace[e.namespace] == e.w {
		delete(s.byNamespace, e.namespace)
	}
}

// snapshots returns the snapshot of namespace, or of every namespace
// for "", in the order of the list.
func (p *Provider) snapshots(namespace string, now time.Time) []joined {
	// The store's generation is read before any usage: a write after it
	// leaves a snapshot that a later list finds out of date, never one
	// that claims a later generation than its usage.
	generation := p.usage.Generation()
	names := []string{namespace}
	if namespace == "" {
		names = p.pods.Namespaces()
	}
	parts := make([]joined, len(names))
	for i, name := range names {
		parts[i] = p.snapshot(name, generation, now).joined
	}
	return parts
}

// snapshot returns the namespace's snapshot for the store's generation,
// joined anew when the one kept no longer holds at now.
func (p *Provider) snapshot(namespace string, generation uint64, now time.Time) *nsSnapshot {
	// The version too is read before the pods, for the same reason.
	version := p.pods.Version(namespace)
	if s := p.snaps.get(namespace); s != nil && s.version == version && s.generation == generation && !now.After(s.freshUntil) {
		return s
	}
	s := &nsSnapshot{
		joined:     p.join(p.pods.List(namespace, labels.Everything()), nil, now),
		version:    version,
		generation: generation,
	}
	if !s.live {
		p.snaps.put(namespace, s)
	}
	return s
}
