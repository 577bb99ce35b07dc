package podcache

import (
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/labels"
)

// Nodes is the node cache as the sources and the provider read it. Lists
// come sorted by name. Safe for concurrent use.
type Nodes interface {
	// Node returns the cached node of that name.
	Node(name string) (*Node, bool)
	// List returns the nodes sel matches.
	List(sel labels.Selector) []*Node
}

// NodeIndex holds nodes by name. The node informer of a Cache feeds it;
// Set and Delete may also be called directly, one caller at a time.
type NodeIndex struct {
	mu     sync.RWMutex
	byName map[string]*Node
	// sorted is every node by name; nil when a node changed since.
	sorted []*Node
}

var _ Nodes = &NodeIndex{}

// NewNodeIndex returns an empty index.
func NewNodeIndex() *NodeIndex { return &NodeIndex{byName: map[string]*Node{}} }

// Set adds n or replaces the node of its name.
func (x *NodeIndex) Set(n *Node) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.byName[n.Name] = n
	x.sorted = nil
}

// Delete removes the node of that name.
func (x *NodeIndex) Delete(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.byName, name)
	x.sorted = nil
}

// Node implements Nodes.
func (x *NodeIndex) Node(name string) (*Node, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n, ok := x.byName[name]
	return n, ok
}

// List implements Nodes.
func (x *NodeIndex) List(sel labels.Selector) []*Node {
	all := x.all()
	if sel == nil || sel.Empty() {
		return slices.Clone(all)
	}
	var out []*Node
	for _, n := range all {
		if sel.Matches(labels.Set(n.Labels)) {
			out = append(out, n)
		}
	}
	return out
}

// all returns every node sorted by name, sorting once per change.
func (x *NodeIndex) all() []*Node {
	x.mu.RLock()
	s := x.sorted
	x.mu.RUnlock()
	if s != nil {
		return s
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sorted == nil {
		x.sorted = make([]*Node, 0, len(x.byName))
		for _, n := range x.byName {
			x.sorted = append(x.sorted, n)
		}
		slices.SortFunc(x.sorted, func(a, b *Node) int { return strings.Compare(a.Name, b.Name) })
	}
	return x.sorted
}
