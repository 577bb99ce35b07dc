package fakekubelet

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/google/uuid"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
)

// Pod is a pod placed on a node; as JSON, the body of
// PUT /v1/nodes/{node}/pods/{namespace}/{name}.
type Pod struct {
	Namespace, Name string            `json:"-"`
	UID             string            `json:"uid,omitempty"` // from namespace and name when empty
	Labels          map[string]string `json:"labels,omitempty"`
	Containers      []Container       `json:"containers,omitempty"` // one named "main" when empty
	// StartTime defaults to the current sample instant. CPU counters count
	// from it, so a pod that started earlier has already used some CPU.
	StartTime time.Time `json:"-"`
}

// Container is a container of a Pod.
type Container struct {
	Name string `json:"name"`
	// MemoryLimit, if positive, makes availableBytes = limit - working set.
	MemoryLimit resource.Quantity `json:"memoryLimit,omitzero"`
}

type podKey = types.NamespacedName

type podState struct {
	pod        Pod
	start      instant
	containers []*containerState
}

// containerState is a container's usage; it starts with its pod.
type containerState struct {
	name   string
	limit  uint64
	cpu    counter
	memory uint64
}

func (f *Fleet) newPodState(p Pod, now instant) *podState {
	if len(p.Containers) == 0 {
		p.Containers = []Container{{Name: "main"}}
	}
	start := now
	// Whole seconds, as the Summary API cannot carry more precision.
	if s := instant(p.StartTime.Truncate(time.Second).Sub(f.tl.epoch)); !p.StartTime.IsZero() && s < now {
		start = s
	}
	ps := &podState{pod: p, start: start}
	for _, c := range p.Containers {
		ps.containers = append(ps.containers, &containerState{name: c.Name, limit: uint64(max(c.MemoryLimit.Value(), 0)),
			cpu: counter{accAt: start, rate: DefaultContainerCPU}, memory: DefaultContainerMemory})
	}
	return ps
}

// SetPod places a pod on a node (fakecore.ErrNotFound for an unknown one),
// or updates it: a pod of the same name on another node is moved, one with
// another UID replaced, with fresh counters. Remembered usage (SetUsage)
// applies to pods the fleet has not seen before.
func (f *Fleet) SetPod(nodeName string, p Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[nodeName]
	if !ok {
		return fmt.Errorf("node %q: %w", nodeName, fakecore.ErrNotFound)
	}
	k := podKey{Namespace: p.Namespace, Name: p.Name}
	p.UID = cmp.Or(p.UID, uuid.NewSHA1(uuid.NameSpaceURL, []byte(k.String())).String())
	now := f.tl.now()
	if old, ok := f.pods[k]; ok && old != n {
		delete(old.pods, k)
		old.updatePodsRateLocked(now)
	}
	f.pods[k] = n
	if ps, ok := n.pods[k]; ok && ps.pod.UID == p.UID {
		ps.pod.Labels = p.Labels
		return nil
	}
	ps := f.newPodState(p, now)
	n.pods[k] = ps
	for _, r := range f.rules {
		if r.matches(ps.pod) {
			r.apply(ps, ps.start)
		}
	}
	n.updatePodsRateLocked(now)
	return nil
}

// RemovePod removes a pod from whichever node it is on, if it is the
// incarnation uid (any for ""), and reports whether it did.
func (f *Fleet) RemovePod(namespace, name, uid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := podKey{Namespace: namespace, Name: name}
	n, ok := f.pods[k]
	if !ok || uid != "" && n.pods[k].pod.UID != uid {
		return false
	}
	delete(f.pods, k)
	delete(n.pods, k)
	n.updatePodsRateLocked(f.tl.now())
	return true
}

// ResetPodCounters restarts the CPU counters of a pod's containers from
// zero, with a new start time, as after a container restart.
func (f *Fleet) ResetPodCounters(namespace, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := podKey{Namespace: namespace, Name: name}
	n, ok := f.pods[k]
	if !ok {
		return fmt.Errorf("pod %s: %w", k, fakecore.ErrNotFound)
	}
	n.pods[k].restart(f.tl.now())
	return nil
}

// ResetCounters restarts the counters of every pod on the node.
func (n *Node) ResetCounters() {
	n.fleet.mu.Lock()
	defer n.fleet.mu.Unlock()
	now := n.fleet.tl.now()
	for _, ps := range n.pods {
		ps.restart(now)
	}
}

func (ps *podState) restart(now instant) {
	ps.start = now
	for _, c := range ps.containers {
		c.cpu.acc, c.cpu.accAt = 0, now // from zero, at the same rate
	}
}

// updatePodsRateLocked sets the rate of the node's pod total from now on.
func (n *Node) updatePodsRateLocked(now instant) {
	var sum uint64
	for _, ps := range n.pods {
		for _, c := range ps.containers {
			sum += c.cpu.rate
		}
	}
	n.podsCPU.setRate(now, sum)
}

func (n *Node) sortedPodsLocked() []*podState {
	return slices.SortedFunc(maps.Values(n.pods), func(a, b *podState) int {
		return cmp.Or(strings.Compare(a.pod.Namespace, b.pod.Namespace), strings.Compare(a.pod.Name, b.pod.Name))
	})
}

// UsageTarget selects the pods a usage applies to: those of Namespace (all
// when empty), named Name (which needs Namespace), and matching Selector
// (nil for all); of each its Container, or, when empty, all, the usage
// spread evenly.
type UsageTarget struct {
	Namespace, Name string
	Selector        labels.Selector
	Container       string
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

// SetUsage sets the usage of every pod t matches from the current sample
// instant on, and of those placed later (new replicas); it returns how many
// matched now.
func (f *Fleet) SetUsage(t UsageTarget, u Usage) int {
	return f.setUsage(usageRule{UsageTarget: t, cpu: &u.CPUNanoCores, memory: &u.MemoryBytes})
}

// ForgetUsage drops every remembered usage: pods placed later start with
// the default.
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
