package fakekubelet

import (
	"slices"

	"k8s.io/apimachinery/pkg/labels"
)

// UsageTarget selects the pods (and optionally one container) a usage
// applies to.
type UsageTarget struct {
	// Namespace limits the target to one namespace; empty means all.
	Namespace string
	// Name selects a single pod; it requires Namespace.
	Name string
	// Selector selects pods by label; nil selects every pod (in Namespace).
	Selector labels.Selector
	// Container selects one container; empty spreads the usage evenly over
	// all containers of each pod.
	Container string
}

// usagePatch is a usage with optional parts: nil leaves a value unchanged.
type usagePatch struct {
	cpu    *uint64
	memory *uint64
}

type usageRule struct {
	target UsageTarget
	patch  usagePatch
}

// matches says whether the rule's target, its Selector set, selects p.
func (r usageRule) matches(p Pod) bool {
	t := r.target
	return (t.Namespace == "" || t.Namespace == p.Namespace) && (t.Name == "" || t.Name == p.Name) && t.Selector.Matches(labels.Set(p.Labels))
}

// SetUsage sets the usage of every placed pod matching the target, from the
// current sample instant on, and remembers it for matching pods placed later
// (for example new replicas). It returns how many pods matched now.
func (f *Fleet) SetUsage(t UsageTarget, u Usage) int {
	return f.setUsage(t, usagePatch{cpu: &u.CPUNanoCores, memory: &u.MemoryBytes})
}

// ForgetUsage drops every remembered usage. Placed pods keep their usage;
// pods placed later start with the default.
func (f *Fleet) ForgetUsage() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

func (f *Fleet) setUsage(t UsageTarget, p usagePatch) int {
	if t.Selector == nil {
		t.Selector = labels.Everything()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rule := usageRule{target: t, patch: p}
	f.rules = append(slices.DeleteFunc(f.rules, func(r usageRule) bool {
		o := r.target
		return o.Namespace == t.Namespace && o.Name == t.Name && o.Container == t.Container && o.Selector.String() == t.Selector.String()
	}), rule)

	now := f.tl.now()
	matched := 0
	for _, n := range f.nodes {
		before := matched
		for _, ps := range n.pods {
			if rule.matches(ps.pod) && applyPatch(ps, t.Container, p, now) {
				matched++
			}
		}
		if matched > before {
			n.updatePodsRateLocked(now)
		}
	}
	return matched
}

// applyPatch sets a pod's usage from instant t on: on one container, or
// spread over all containers with any remainder on the first ones. It
// reports whether the pod had the container.
func applyPatch(ps *podState, container string, p usagePatch, t instant) bool {
	targets := ps.containers
	if container != "" {
		targets = slices.DeleteFunc(slices.Clone(targets), func(c *containerState) bool { return c.name != container })
		if len(targets) == 0 {
			return false
		}
	}
	k := uint64(len(targets))
	for i, c := range targets {
		if p.cpu != nil {
			c.cpu.setRate(t, share(*p.cpu, k, uint64(i)))
		}
		if p.memory != nil {
			c.memory = share(*p.memory, k, uint64(i))
		}
	}
	return true
}

// share returns the i-th of k near-equal parts of total; the parts sum to total.
func share(total, k, i uint64) uint64 {
	s := total / k
	if i < total%k {
		s++
	}
	return s
}
