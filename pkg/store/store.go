// Package store keeps the latest samples of every node and container and the
// usage derived from them, and the named series of pods' endpoints and node
// exporters with the values derived from them: one staleness rule for both,
// and one rule for a counter's rate.
//
// Usage is sharded by (source, node). A shard is immutable once published: a
// write builds the node's next shard from the previous one and swaps a
// pointer, so readers never wait for a writer and see each node whole. Named
// series are held by target (named.go), since several targets (each pod's
// own, and an exporter) report the pods of one node.
package store

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// Config configures a Store.
type Config struct {
	Clock clock.Clock
	// Sources lists source names in the order a pod reported by several of
	// them is looked up: the first that has fresh usage for it wins.
	Sources []string
	// FirstWindowMax is the longest time since a container started over which
	// its first sample alone yields a CPU rate (see README, "Values").
	FirstWindowMax time.Duration
	// MinWindow is the shortest window a CPU rate is computed over:
	// MinWindow of the scrape resolution; zero means 5 s.
	MinWindow time.Duration
	// StaleAfter is how long usage is served after it was derived.
	StaleAfter time.Duration
}

// Store is safe for concurrent use. Writes for the same (source, node) must
// not race; the scraper writes each target from one goroutine.
type Store struct {
	clock      clock.Clock
	sources    []string
	rates      rates
	staleAfter time.Duration

	// nodes holds every node's shards by node name (*nodeShards): one
	// look-up of a string per read, then a slot per source.
	nodes sync.Map

	writeMu sync.Mutex // serialises the read-modify-write of a shard

	// named holds the named series (sources.SeriesPoint), apart from the
	// shards: they are owned by targets, not by nodes.
	named named

	// samples numbers the pods' derived usage (PodUsage.Sample).
	samples atomic.Uint64
	// gen counts the changes of every node's shards (Generation).
	gen atomic.Uint64
}

var (
	_ sources.Sink       = &Store{}
	_ sources.SeriesSink = &Store{}
)

// nodeShards is what every source knows of one node: a shard per source,
// in the order of Config.Sources. gen counts the changes of bySource: a
// reader that saw gen before it read the shards knows they are the same
// while gen is (see PodRef).
type nodeShards struct {
	bySource []atomic.Pointer[shard]
	gen      atomic.Uint64
}

// set makes sh the shard of source, and returns the one it replaces.
// Callers hold writeMu.
func (n *nodeShards) set(source int, sh *shard) *shard {
	old := n.bySource[source].Swap(sh)
	n.gen.Add(1)
	return old
}

// shard is source's shard (an index in Config.Sources); nil when n is nil
// or the source has not written the node.
func (n *nodeShards) shard(source int) *shard {
	if n == nil {
		return nil
	}
	return n.bySource[source].Load()
}

type podKey struct{ namespace, name string }

// shard is everything one source knows of one node. Never mutated after it
// is stored.
type shard struct {
	scrapedAt time.Time // last successful scrape, zero if none
	failedAt  time.Time // last failed scrape, zero if none since success
	err       error
	node      *series
	pods      map[podKey]*pod
}

type pod struct {
	uid        string
	containers []container
	// inline holds the containers of a pod of at most two, most pods, so
	// that a pod is one allocation per scrape.
	inline [2]container
	// read is what readers make of the pod, derived at the first read: the
	// pod never changes, so neither does its usage.
	read atomic.Pointer[podRead]
}

// podRead is a pod's usage as served, or why it has none but staleness,
// which depends on when it is read.
type podRead struct {
	usage PodUsage
	// inline holds the containers of a pod of at most two.
	inline [2]ContainerUsage
	why    *Unavailable
	// derivedAt is the oldest of its containers' derivedAt: the pod is
	// fresh while that is.
	derivedAt time.Time
	// staleContainer names the container whose usage is the oldest.
	staleContainer string
}

type container struct {
	name string
	series
}

// New returns an empty Store.
func New(cfg Config) *Store {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.MinWindow <= 0 {
		cfg.MinWindow = maxMinWindow
	}
	return &Store{
		clock:      cfg.Clock,
		sources:    cfg.Sources,
		rates:      rates{minWindow: cfg.MinWindow, firstWindowMax: cfg.FirstWindowMax},
		staleAfter: cfg.StaleAfter,
	}
}

// sourceIndex is the index of source in Config.Sources. A source that is
// not there is a wiring error: its samples could never be read.
func (s *Store) sourceIndex(source string) int {
	for i, name := range s.sources {
		if name == source {
			return i
		}
	}
	panic(fmt.Sprintf("store: source %q is not in Config.Sources %q", source, s.sources))
}

// node returns the node's shards, nil when no source has written it.
func (s *Store) node(name string) *nodeShards {
	v, ok := s.nodes.Load(name)
	if !ok {
		return nil
	}
	return v.(*nodeShards)
}

// load returns the shard of source (an index in Config.Sources) for node.
func (s *Store) load(source int, node string) *shard {
	return s.node(node).shard(source)
}

// publish makes sh the shard of source for node. Callers hold writeMu.
func (s *Store) publish(source int, node string, sh *shard) {
	n := s.node(node)
	if n == nil {
		n = &nodeShards{bySource: make([]atomic.Pointer[shard], len(s.sources))}
		s.nodes.Store(node, n)
	}
	s.set(n, source, sh)
}

// set makes sh the shard of source on n, and returns the one it replaces;
// the store's generation moves after the shard does, so that a reader that
// saw the generation before its reads knows they are no older than it.
// Callers hold writeMu.
func (s *Store) set(n *nodeShards, source int, sh *shard) *shard {
	old := n.set(source, sh)
	s.gen.Add(1)
	return old
}

// Generation counts the store's writes: every scrape stored, failed or
// pruned moves it. While it is unchanged, every read returns what it
// returned before, until that turns stale (PodUsage.FreshUntil).
func (s *Store) Generation() uint64 { return s.gen.Load() }

// Store implements sources.Sink.
func (s *Store) Store(source string, nodes []string, batch *sources.Batch, scrapedAt time.Time) {
	src := s.sourceIndex(source)
	s.writeMu.Lock()
	defer s.writeMu.Unlock()

	// Each node's next shard, and the one it replaces, looked up once
	// per node rather than once per pod.
	type change struct{ next, prev *shard }
	changes := make(map[string]change, len(nodes))
	for _, n := range nodes {
		// Sized for the pods of the batch, which are most often all on
		// one node: no growth of the map while it fills.
		size := len(batch.Pods)
		if len(nodes) > 1 {
			size /= len(nodes)
		}
		changes[n] = change{
			next: &shard{scrapedAt: scrapedAt, pods: make(map[podKey]*pod, size)},
			prev: s.load(src, n),
		}
	}
	for i := range batch.Nodes {
		np := &batch.Nodes[i]
		c, ok := changes[np.Name]
		if !ok {
			continue // not a node this target owns
		}
		var prev *series
		if c.prev != nil {
			prev = c.prev.node
		}
		ns := s.rates.next(prev, np.Point, scrapedAt)
		c.next.node = &ns
	}
	for i := range batch.Pods {
		pp := &batch.Pods[i]
		c, ok := changes[pp.Node]
		if !ok {
			continue
		}
		key := podKey{pp.Namespace, pp.Name}
		var prevPod *pod
		if c.prev != nil {
			prevPod = c.prev.pods[key]
			if prevPod != nil && pp.UID != "" && prevPod.uid != "" && prevPod.uid != pp.UID {
				prevPod = nil // same name, new pod
			}
		}
		c.next.pods[key] = s.nextPod(prevPod, pp, scrapedAt)
	}
	for n, c := range changes {
		s.publish(src, n, c.next)
		pointsDelta(c.prev, c.next)
	}
}

func (s *Store) nextPod(prev *pod, pp *sources.PodPoint, scrapedAt time.Time) *pod {
	p := &pod{uid: pp.UID}
	if n := len(pp.Containers); n <= len(p.inline) {
		p.containers = p.inline[:n]
	} else {
		p.containers = make([]container, n)
	}
	for i := range pp.Containers {
		cp := &pp.Containers[i]
		var prevSeries *series
		if prev != nil {
			for j := range prev.containers {
				if prev.containers[j].name == cp.Name {
					prevSeries = &prev.containers[j].series
					break
				}
			}
		}
		p.containers[i] = container{name: cp.Name, series: s.rates.next(prevSeries, cp.Point, scrapedAt)}
	}
	return p
}

// Failed implements sources.Sink.
func (s *Store) Failed(source string, nodes []string, err error, failedAt time.Time) {
	src := s.sourceIndex(source)
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	for _, n := range nodes {
		sh := &shard{}
		if old := s.load(src, n); old != nil {
			*sh = *old
		}
		sh.failedAt, sh.err = failedAt, err
		s.publish(src, n, sh)
	}
}

// Prune implements sources.Sink.
func (s *Store) Prune(source string, keep map[string]struct{}) {
	src := s.sourceIndex(source)
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.nodes.Range(func(k, v any) bool {
		if _, ok := keep[k.(string)]; ok {
			return true
		}
		n := v.(*nodeShards)
		if old := s.set(n, src, nil); old != nil {
			pointsDelta(old, nil)
		}
		for i := range n.bySource {
			if n.bySource[i].Load() != nil {
				return true
			}
		}
		s.nodes.Delete(k) // no source knows the node anymore
		return true
	})
}

// eachShard calls f with every shard until f returns false.
func (s *Store) eachShard(f func(*shard) bool) {
	s.nodes.Range(func(_, v any) bool {
		n := v.(*nodeShards)
		for i := range n.bySource {
			if sh := n.bySource[i].Load(); sh != nil && !f(sh) {
				return false
			}
		}
		return true
	})
}

// fresh says whether usage derived at t may still be served.
func (s *Store) fresh(t, now time.Time) bool {
	return !t.IsZero() && now.Sub(t) <= s.staleAfter
}

// HasFreshData reports whether any target was scraped successfully within
// the staleness bound: the server has something to serve.
func (s *Store) HasFreshData() bool {
	now := s.clock.Now()
	found := false
	s.eachShard(func(sh *shard) bool {
		found = s.fresh(sh.scrapedAt, now)
		return !found
	})
	return found
}

// HasFreshUsage reports whether some node or pod has usage to serve: the
// server has answers, not just samples (most usage needs two).
func (s *Store) HasFreshUsage() bool {
	now := s.clock.Now()
	found := false
	s.eachShard(func(sh *shard) bool {
		if !s.fresh(sh.scrapedAt, now) {
			return true
		}
		if n := sh.node; n != nil && n.hasUsage() && s.fresh(n.derivedAt, now) {
			found = true
			return false
		}
		for _, p := range sh.pods {
			for i := range p.containers {
				if c := &p.containers[i]; c.hasUsage() && s.fresh(c.derivedAt, now) {
					found = true
					return false
				}
			}
		}
		return true
	})
	return found
}

// Complete reports whether source's shards of nodes hold fresh usage for
// everything they hold: the node, when the source reports it, and every
// container of every pod. A target's nodes are complete once it has been
// scraped twice (most usage needs two samples), until a new container
// arrives.
func (s *Store) Complete(source string, nodes []string) bool {
	src := s.sourceIndex(source)
	now := s.clock.Now()
	for _, n := range nodes {
		sh := s.load(src, n)
		if sh == nil || !s.fresh(sh.scrapedAt, now) {
			return false
		}
		if sh.node != nil && !sh.node.hasUsage() {
			return false
		}
		for _, p := range sh.pods {
			for i := range p.containers {
				if !p.containers[i].hasUsage() {
					return false
				}
			}
		}
	}
	return true
}

// Unavailable explains why a pod or node has no metrics.
type Unavailable struct{ Reason string }

func (u *Unavailable) Error() string { return u.Reason }

func unavailable(format string, args ...any) *Unavailable {
	return &Unavailable{Reason: fmt.Sprintf(format, args...)}
}

// shardReason explains a missing or unusable shard for node.
func (s *Store) shardReason(sh *shard, node string, now time.Time) *Unavailable {
	switch {
	case sh == nil || (sh.scrapedAt.IsZero() && sh.err == nil):
		return unavailable("node %q has not been scraped yet", node)
	case sh.err != nil && !s.fresh(sh.scrapedAt, now):
		return unavailable("node %q is unreachable: %v", node, sh.err)
	case !s.fresh(sh.scrapedAt, now):
		return unavailable("metrics of node %q are stale: last scraped %s ago", node, now.Sub(sh.scrapedAt).Round(time.Second))
	}
	return nil
}
