package store

import (
	"time"
)

// ContainerUsage is the usage of one container.
type ContainerUsage struct {
	Name string
	Usage
}

// PodUsage is the usage of one pod. Timestamp and Window are those of its
// container with the earliest timestamp, as metrics-server v0.8.0 serves
// them (pkg/storage/pod.go, GetMetrics): the HPA compares the timestamp
// with readiness transitions, so it must not claim a later sample than the
// pod's oldest.
// Containers is shared between readers and must not be modified.
type PodUsage struct {
	Timestamp  time.Time
	Window     time.Duration
	Containers []ContainerUsage
	// Sample identifies the samples the usage was derived from: it is the
	// same for every read of them and changes with the next scrape of the
	// pod, so a reader may keep what it derives from the usage under it.
	// Never zero for usage from a Store.
	Sample uint64
	// FreshUntil is the last instant the usage may be served: while the
	// store's Generation is unchanged, every read of the pod until then
	// returns this usage. Zero when not known.
	FreshUntil time.Time
}

// PodRef is where a read found a pod's usage. Given to the next read of the
// same pod (the same namespace, name, uid and node), it spares that read
// the look-ups of the node and the pod while no source has written the node
// since: the usage is then the same, and only its freshness is checked
// again. The zero PodRef refers to nothing.
type PodRef struct {
	node   *nodeShards
	gen    uint64 // node.gen before the read looked at the shards
	source int
	read   *podRead
}

// Pod returns the usage of the pod namespace/name running on node. uid, when
// not empty, must match what the source reported. Every container must have
// fresh usage, or the pod has none: a partial pod would mislead an
// autoscaler. ref is where an earlier read of the pod found it, or zero;
// Pod returns where this one did.
func (s *Store) Pod(namespace, name, uid, node string, ref PodRef) (PodUsage, PodRef, *Unavailable) {
	now := s.clock.Now()
	if u, ok := s.podAt(ref, now); ok {
		return u, ref, nil
	}
	key := podKey{namespace, name}
	var why *Unavailable
	n := s.node(node)
	var gen uint64
	if n != nil {
		gen = n.gen.Load()
	}
	for src := range s.sources {
		sh := n.shard(src)
		if r := s.shardReason(sh, node, now); r != nil {
			why = first(why, r)
			continue
		}
		p := sh.pods[key]
		if p == nil || (uid != "" && p.uid != "" && p.uid != uid) {
			why = first(why, unavailable("node %q did not report pod %s/%s in its last scrape", node, namespace, name))
			continue
		}
		read := s.podRead(p)
		if r := s.usable(read, now); r != nil {
			why = first(why, r)
			continue
		}
		return s.served(sh, read), PodRef{node: n, gen: gen, source: src, read: read}, nil
	}
	if why == nil {
		why = unavailable("no source reports node %q", node)
	}
	return PodUsage{}, PodRef{}, why
}

// podAt returns the usage ref found, if it still holds: no source has
// written the node since, so no source before ref's has the pod now and
// ref's has the same samples of it; and they are fresh at now. Only time
// can have changed what made them usable, so only freshness is checked
// again; a read that fails it takes the full look-up, which says why.
func (s *Store) podAt(ref PodRef, now time.Time) (PodUsage, bool) {
	if ref.read == nil || ref.node.gen.Load() != ref.gen {
		return PodUsage{}, false
	}
	sh := ref.node.shard(ref.source)
	if sh == nil || !s.fresh(sh.scrapedAt, now) || !s.fresh(ref.read.derivedAt, now) {
		return PodUsage{}, false
	}
	return s.served(sh, ref.read), true
}

// served is r's usage as read from sh: fresh until the scrape or the
// samples it comes from turn stale, whichever is first.
func (s *Store) served(sh *shard, r *podRead) PodUsage {
	u := r.usage
	u.FreshUntil = sh.scrapedAt
	if r.derivedAt.Before(u.FreshUntil) {
		u.FreshUntil = r.derivedAt
	}
	u.FreshUntil = u.FreshUntil.Add(s.staleAfter)
	return u
}

func first(a, b *Unavailable) *Unavailable {
	if a != nil {
		return a
	}
	return b
}

// podRead is what readers make of p, derived at its first read.
func (s *Store) podRead(p *pod) *podRead {
	r := p.read.Load()
	if r == nil {
		r = p.derive(s.samples.Add(1))
		if !p.read.CompareAndSwap(nil, r) {
			r = p.read.Load()
		}
	}
	return r
}

// usable says why r cannot be served at now, or nil.
func (s *Store) usable(r *podRead, now time.Time) *Unavailable {
	switch {
	case r.why != nil:
		return r.why
	case !s.fresh(r.derivedAt, now):
		return unavailable("usage of container %q is stale: its samples stopped advancing", r.staleContainer)
	}
	return nil
}

// derive makes the pod's usage from its containers'. Every container must
// have usage, or the pod has none: a partial pod would mislead an
// autoscaler.
func (p *pod) derive(sample uint64) *podRead {
	if len(p.containers) == 0 {
		return &podRead{why: unavailable("no container of the pod has been sampled yet")}
	}
	r := &podRead{usage: PodUsage{Sample: sample}}
	if n := len(p.containers); n <= len(r.inline) {
		r.usage.Containers = r.inline[:n]
	} else {
		r.usage.Containers = make([]ContainerUsage, n)
	}
	for i := range p.containers {
		c := &p.containers[i]
		if !c.hasUsage() {
			return &podRead{why: unavailable("container %q has one sample so far; usage needs a second", c.name)}
		}
		r.usage.Containers[i] = ContainerUsage{Name: c.name, Usage: c.usage}
		if i == 0 || c.usage.Timestamp.Before(r.usage.Timestamp) {
			r.usage.Timestamp, r.usage.Window = c.usage.Timestamp, c.usage.Window
		}
		if i == 0 || c.derivedAt.Before(r.derivedAt) {
			r.derivedAt, r.staleContainer = c.derivedAt, c.name
		}
	}
	return r
}

// Node returns the usage of a node.
//
// A source that reports no node-level usage (ukpd: a kraftlet node is a
// virtual node, whose instances are its only load) gives the node the sum
// of its pods' usage, once every container of them has fresh usage; its
// timestamp and window are those of the container sampled earliest, as a
// pod's are. A kraftlet node's host, where it runs a kubelet, counts the
// same instances' VMMs under its own node name.
func (s *Store) Node(name string) (Usage, *Unavailable) {
	now := s.clock.Now()
	var why *Unavailable
	n := s.node(name)
	for src := range s.sources {
		sh := n.shard(src)
		if sh == nil {
			continue
		}
		if r := s.shardReason(sh, name, now); r != nil {
			why = first(why, r)
			continue
		}
		switch n := sh.node; {
		case n == nil && len(sh.pods) > 0:
			u, r := s.sumOfPods(sh, name, now)
			if r == nil {
				return u, nil
			}
			why = first(why, r)
		case n == nil:
			why = first(why, unavailable("node %q reported no node-level usage and runs no pod", name))
		case !n.hasUsage():
			why = first(why, unavailable("node %q has one sample so far; usage needs a second", name))
		case !s.fresh(n.derivedAt, now):
			why = first(why, unavailable("usage of node %q is stale: its samples stopped advancing", name))
		default:
			return n.usage, nil
		}
	}
	if why == nil {
		why = unavailable("node %q has not been scraped yet", name)
	}
	return Usage{}, why
}

// sumOfPods is the usage of the pods of sh, all on node, summed.
func (s *Store) sumOfPods(sh *shard, node string, now time.Time) (Usage, *Unavailable) {
	var sum Usage
	for key, p := range sh.pods {
		for i := range p.containers {
			c := &p.containers[i]
			if !c.hasUsage() || !s.fresh(c.derivedAt, now) {
				return Usage{}, unavailable("node %q is the sum of its pods' usage, and pod %s/%s has none yet for container %q", node, key.namespace, key.name, c.name)
			}
			sum.CPUNanoCores += c.usage.CPUNanoCores
			sum.MemoryBytes += c.usage.MemoryBytes
			if sum.Timestamp.IsZero() || c.usage.Timestamp.Before(sum.Timestamp) {
				sum.Timestamp, sum.Window = c.usage.Timestamp, c.usage.Window
			}
		}
	}
	if sum.Timestamp.IsZero() {
		return Usage{}, unavailable("node %q reported no node-level usage and its pods no container", node)
	}
	return sum, nil
}
