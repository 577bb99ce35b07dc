package store

import (
	"time"
)

// ContainerUsage is the usage of one container.
type ContainerUsage struct {
	Name string
	Usage
}

// PodUsage is the usage of one pod. Timestamp is the latest of its
// containers' and Window the longest, so the pod's window covers them all.
type PodUsage struct {
	Timestamp  time.Time
	Window     time.Duration
	Containers []ContainerUsage
}

// Pod returns the usage of the pod namespace/name running on node. uid, when
// not empty, must match what the source reported. Every container must have
// fresh usage, or the pod has none: a partial pod would mislead an
// autoscaler.
func (s *Store) Pod(namespace, name, uid, node string) (PodUsage, *Unavailable) {
	now := s.clock.Now()
	key := podKey{namespace, name}
	var why *Unavailable
	for _, src := range s.sources {
		sh := s.load(shardKey{src, node})
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
	if len(p.containers) == 0 {
		return PodUsage{}, unavailable("no container of the pod has been sampled yet")
	}
	out := PodUsage{Containers: make([]ContainerUsage, len(p.containers))}
	for i := range p.containers {
		c := &p.containers[i]
		if !c.hasUsage() {
			return PodUsage{}, unavailable("container %q has one sample so far; usage needs a second", c.name)
		}
		if !s.fresh(c.derivedAt, now) {
			return PodUsage{}, unavailable("usage of container %q is stale: its samples stopped advancing", c.name)
		}
		out.Containers[i] = ContainerUsage{Name: c.name, Usage: c.usage}
		if c.usage.Timestamp.After(out.Timestamp) {
			out.Timestamp = c.usage.Timestamp
		}
		out.Window = max(out.Window, c.usage.Window)
	}
	return out, nil
}

// Node returns the usage of a node.
func (s *Store) Node(name string) (Usage, *Unavailable) {
	now := s.clock.Now()
	var why *Unavailable
	for _, src := range s.sources {
		sh := s.load(shardKey{src, name})
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
