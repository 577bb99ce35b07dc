package fakekubelet

import (
	"cmp"
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

// usageRule is a usage set for a target, and remembered for matching pods
// placed later: nil leaves a value unchanged.
type usageRule struct {
	UsageTarget
	cpu, memory *uint64
}

// matches says whether the rule's target, its Selector set, selects p.
func (r usageRule) matches(p Pod) bool {
	return (r.Namespace == "" || r.Namespace == p.Namespace) && (r.Name == "" || r.Name == p.Name) && r.Selector.Matches(labels.Set(p.Labels))
}

// SetUsage sets the usage of every placed pod matching the target, from the
// current sample instant on, and remembers it for matching pods placed later
// (for example new replicas). It returns how many pods matched now.
func (f *Fleet) SetUsage(t UsageTarget, u Usage) int {
	return f.setUsage(usageRule{UsageTarget: t, cpu: &u.CPUNanoCores, memory: &u.MemoryBytes})
}

// ForgetUsage drops every remembered usage. Placed pods keep their usage;
// pods placed later start with the default.
func (f *Fleet) ForgetUsage() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

func (f *Fleet) setUsage(rule usageRule) int {
	rule.Selector = cmp.Or[labels.Selector](rule.Selector, labels.Everything())
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(slices.DeleteFunc(f.rules, func(r usageRule) bool {
		return r.Namespace == rule.Namespace && r.Name == rule.Name && r.Container == rule.Container && r.Selector.String() == rule.Selector.String()
	}), rule)

	now := f.tl.now()
	matched := 0
	for _, n := range f.nodes {
		before := matched
		for _, ps := range n.pods {
			if rule.matches(ps.pod) && rule.apply(ps, now) {
				matched++
			}
		}
		if matched > before {
			n.updatePodsRateLocked(now)
		}
	}
	return matched
}

// apply sets a pod's usage from instant t on: on the rule's container, or
// spread over all containers with any remainder on the first ones. It
// reports whether the pod had the container.
func (r usageRule) apply(ps *podState, t instant) bool {
	targets := ps.containers
	if r.Container != "" {
		targets = slices.DeleteFunc(slices.Clone(targets), func(c *containerState) bool { return c.name != r.Container })
		if len(targets) == 0 {
			return false
		}
	}
	k := uint64(len(targets))
	for i, c := range targets {
		if r.cpu != nil {
			c.cpu.setRate(t, share(*r.cpu, k, uint64(i)))
		}
		if r.memory != nil {
			c.memory = share(*r.memory, k, uint64(i))
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
