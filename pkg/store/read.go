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
}

// Pod returns the usage of the pod namespace/name running on node. uid, when
// not empty, must match what the source reported. Every container must have
// fresh usage, or the pod has none: a partial pod would mislead an
// autoscaler.
func (s *Store) Pod(namespace, name, uid, node string) (PodUsage, *Unavailable) {
	now := s.clock.Now()
	key := podKey{namespace, name}
	var why *Unavailable
	n := s.node(node)
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
		if u, r := s.podUsage(p, now); r != nil {
			why = first(why, r)
		} else {
			return u, nil
		}
	}
	if why == nil {
		why = unavailable("no source reports node %q", node)
	}
	return PodUsage{}, why
}

func first(a, b *Unavailable) *Unavailable {
	if a != nil {
		return a
	}
	return b
}

func (s *Store) podUsage(p *pod, now time.Time) (PodUsage, *Unavailable) {
	r := p.read.Load()
	if r == nil {
		r = p.derive(s.samples.Add(1))
		if !p.read.CompareAndSwap(nil, r) {
			r = p.read.Load()
		}
	}
	switch {
	case r.why != nil:
		return PodUsage{}, r.why
	case !s.fresh(r.derivedAt, now):
		return PodUsage{}, unavailable("usage of container %q is stale: its samples stopped advancing", r.staleContainer)
	}
	return r.usage, nil
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
		case n == nil:
			why = first(why, unavailable("node %q reported no node-level usage", name))
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
