package podcache

import (
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Pods is the pod cache as the provider and the sources read it. Lists
// come sorted by (namespace, name), as metrics-server sorts its answers.
// Every Pod returned is shared and read-only but for its memo
// (Pod.SetMemo). Safe for concurrent use.
type Pods interface {
	// Pod returns the cached pod namespace/name.
	Pod(namespace, name string) (*Pod, bool)
	// Namespaces returns the names of the namespaces that hold pods,
	// sorted; read-only.
	Namespaces() []string
	// Version returns a number that changes whenever a pod of namespace
	// is added, replaced or deleted, and whenever a change of a
	// LeaderWorkerSet StatefulSet of namespace may change the members of
	// its groups (Group, Leads); 0 when it holds no pod.
	Version(namespace string) uint64
	// List returns the pods of namespace ("" for all) that sel matches. A
	// selector with an equality or set requirement is answered from a
	// label index, in time proportional to the pods that carry the label
	// value rather than to the namespace.
	List(namespace string, sel labels.Selector) []*Pod
	// Group returns the verified members of a LeaderWorkerSet group by
	// group.Key, sorted by name: its verified leader (Leads) and the
	// workers that leader's StatefulSet controls. A pod that only carries
	// the group's labels is left out, and a group with no verified leader
	// has no members. The slice is the caller's.
	Group(key string) []*Pod
	// Leads says whether p is its group's verified leader: the only pod
	// that may report, or be asked for, its group's usage and values. Use
	// it, not Pod.Leader, which reads the labels alone.
	Leads(p *Pod) bool
	// HasGroups says whether any pod carrying group labels is cached,
	// verified or not: a cheap hint that Group may find members.
	HasGroups() bool
	// ByInstance returns the pod and container whose status names the
	// unikernel instance of that UUID as its containerID (Pod.Instances).
	ByInstance(uuid string) (*Pod, string, bool)
	// LeaderWorkerSet says whether the LeaderWorkerSet namespace/name is
	// known whatever its pods: its leader StatefulSet, which the
	// LeaderWorkerSet controller names after it and keeps at zero groups,
	// is cached and controlled by it. An index that does not verify
	// groups knows none.
	LeaderWorkerSet(namespace, name string) bool
}

// PodIndex holds pods by namespace and name, by label and by
// LeaderWorkerSet group. The pod informer of a Cache feeds it; Set and
// Delete may also be called directly, one caller at a time.
//
// The index of a Cache verifies group membership against the
// LeaderWorkerSet's StatefulSets (membership.go); an index made by
// NewPodIndex takes groups from labels alone.
type PodIndex struct {
	mu         sync.RWMutex
	namespaces map[string]*namespace
	// names are the namespaces' names, sorted; nil when a namespace was
	// added or removed since they were last sorted.
	names  []string
	groups map[string][]*Pod
	// instances maps an instance UUID to the pod and container it runs.
	instances map[string]instanceRef
	// versions counts the changes of every namespace (Version).
	versions uint64

	// sets are the LeaderWorkerSet StatefulSets that group membership is
	// verified against; nil when it is not (NewPodIndex).
	sets *statefulSets
	// unverified are the pods found carrying group labels but not
	// verified, each counted and logged once.
	unverified unverifiedSet
}

var _ Pods = &PodIndex{}

// namespace holds one namespace's pods sorted by name, and for each label
// key and value the pods that carry it, sorted by name too.
type namespace struct {
	pods   []*Pod
	labels map[string]map[string][]*Pod
	// version is the index's count of changes at the namespace's last.
	version uint64
}

// NewPodIndex returns an empty index that does NOT verify group
// membership: any pod carrying a group's labels is a member, and any pod
// labelled worker-index 0 leads its group. It is for tests and tools that
// build pods by hand; a server reads the index of a Cache (New), which
// always verifies.
func NewPodIndex() *PodIndex { return newPodIndex(nil) }

// newPodIndex returns an empty index that verifies group membership
// against sets, or does not when sets is nil.
func newPodIndex(sets *statefulSets) *PodIndex {
	return &PodIndex{namespaces: map[string]*namespace{}, groups: map[string][]*Pod{}, instances: map[string]instanceRef{}, sets: sets}
}

type instanceRef struct {
	pod       *Pod
	container string
}

// ByInstance implements Pods.
func (x *PodIndex) ByInstance(uuid string) (*Pod, string, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	r, ok := x.instances[strings.ToLower(uuid)]
	return r.pod, r.container, ok
}

func byName(a *Pod, name string) int { return strings.Compare(a.Name, name) }

// insert puts p into s, sorted by name, replacing a pod of the same name.
func insert(s []*Pod, p *Pod) []*Pod {
	i, found := slices.BinarySearchFunc(s, p.Name, byName)
	if found {
		s[i] = p
		return s
	}
	return slices.Insert(s, i, p)
}

// remove takes the pod named name out of s.
func remove(s []*Pod, name string) []*Pod {
	if i, found := slices.BinarySearchFunc(s, name, byName); found {
		return slices.Delete(s, i, i+1)
	}
	return s
}

// Set adds p or replaces the pod of its namespace and name.
func (x *PodIndex) Set(p *Pod) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ns := x.namespaces[p.Namespace]
	if ns == nil {
		ns = &namespace{labels: map[string]map[string][]*Pod{}}
		x.namespaces[p.Namespace] = ns
		x.names = nil
	}
	x.versions++
	ns.version = x.versions
	if i, found := slices.BinarySearchFunc(ns.pods, p.Name, byName); found {
		old := ns.pods[i]
		x.unindex(ns, old)
		if old.UID != p.UID {
			x.unverified.forget(old.UID)
		}
		ns.pods[i] = p
	} else {
		ns.pods = slices.Insert(ns.pods, i, p)
	}
	for k, v := range p.Labels {
		values := ns.labels[k]
		if values == nil {
			values = map[string][]*Pod{}
			ns.labels[k] = values
		}
		values[v] = insert(values[v], p)
	}
	if key, ok := p.GroupKey(); ok {
		x.groups[key] = insert(x.groups[key], p)
	}
	for _, in := range p.Instances() {
		x.instances[in.UUID] = instanceRef{pod: p, container: in.Container}
	}
}

// unindex takes old out of the label and group indexes.
func (x *PodIndex) unindex(ns *namespace, old *Pod) {
	for _, in := range old.Instances() {
		if x.instances[in.UUID].pod == old {
			delete(x.instances, in.UUID)
		}
	}
	for k, v := range old.Labels {
		values := ns.labels[k]
		if values[v] = remove(values[v], old.Name); len(values[v]) == 0 {
			delete(values, v)
		}
		if len(values) == 0 {
			delete(ns.labels, k)
		}
	}
	if key, ok := old.GroupKey(); ok {
		members := remove(x.groups[key], old.Name)
		if len(members) == 0 {
			delete(x.groups, key)
		} else {
			x.groups[key] = members
		}
	}
}

// Delete removes the pod namespace/name.
func (x *PodIndex) Delete(namespaceName, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ns := x.namespaces[namespaceName]
	if ns == nil {
		return
	}
	i, found := slices.BinarySearchFunc(ns.pods, name, byName)
	if !found {
		return
	}
	x.unindex(ns, ns.pods[i])
	x.unverified.forget(ns.pods[i].UID)
	ns.pods = slices.Delete(ns.pods, i, i+1)
	x.versions++
	ns.version = x.versions
	if len(ns.pods) == 0 {
		delete(x.namespaces, namespaceName)
		x.names = nil
	}
}

// Pod implements Pods.
func (x *PodIndex) Pod(namespace, name string) (*Pod, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ns := x.namespaces[namespace]
	if ns == nil {
		return nil, false
	}
	if i, found := slices.BinarySearchFunc(ns.pods, name, byName); found {
		return ns.pods[i], true
	}
	return nil, false
}

// Group implements Pods. On an index that verifies, each member is
// checked against the StatefulSet index at every call: groups are small,
// and a StatefulSet that changes needs no re-indexing of its pods.
func (x *PodIndex) Group(key string) []*Pod {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.sets == nil {
		return slices.Clone(x.groups[key])
	}
	return x.verified(x.groups[key])
}

// HasGroups implements Pods.
func (x *PodIndex) HasGroups() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.groups) > 0
}

// LeaderWorkerSet implements Pods.
func (x *PodIndex) LeaderWorkerSet(namespace, name string) bool {
	if x.sets == nil {
		return false
	}
	s := x.sets.get(namespace, name)
	return s != nil && s.controller != nil && s.controller.Group == lwsGroup && s.controller.Kind == lwsKind && s.controller.Name == name
}

// Namespaces implements Pods.
func (x *PodIndex) Namespaces() []string { return x.sortedNames() }

// Version implements Pods. Versions come from one count for the whole
// index, so a namespace emptied and filled again never shows an earlier
// version.
func (x *PodIndex) Version(namespace string) uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if ns := x.namespaces[namespace]; ns != nil {
		return ns.version
	}
	return 0
}

// List implements Pods.
func (x *PodIndex) List(namespace string, sel labels.Selector) []*Pod {
	if sel == nil {
		sel = labels.Everything()
	}
	reqs, selectable := sel.Requirements()
	if !selectable {
		return nil
	}
	if namespace != "" {
		x.mu.RLock()
		defer x.mu.RUnlock()
		return x.namespaces[namespace].list(nil, sel, reqs)
	}
	names := x.sortedNames()
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []*Pod
	if sel.Empty() {
		n := 0
		for _, ns := range x.namespaces {
			n += len(ns.pods)
		}
		out = make([]*Pod, 0, n)
	}
	for _, name := range names {
		out = x.namespaces[name].list(out, sel, reqs)
	}
	return out
}

// touch moves on the version of namespace, if it holds pods: who belongs
// to its groups may have changed.
func (x *PodIndex) touch(namespace string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if ns := x.namespaces[namespace]; ns != nil {
		x.versions++
		ns.version = x.versions
	}
}

// sortedNames returns the namespaces' names, sorted once per change of the
// set of namespaces. A namespace added after the names were taken is left
// out of that list, as it would be had the list come a moment earlier.
func (x *PodIndex) sortedNames() []string {
	x.mu.RLock()
	names := x.names
	x.mu.RUnlock()
	if names != nil {
		return names
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.names == nil {
		x.names = make([]string, 0, len(x.namespaces))
		for name := range x.namespaces {
			x.names = append(x.names, name)
		}
		slices.Sort(x.names)
	}
	return x.names
}

// list appends the namespace's pods that sel matches to out. The smallest
// set of pods that an equality or set requirement allows is scanned; with
// no such requirement, every pod of the namespace.
func (ns *namespace) list(out []*Pod, sel labels.Selector, reqs labels.Requirements) []*Pod {
	if ns == nil {
		return out
	}
	if sel.Empty() {
		return append(out, ns.pods...)
	}
	candidates, indexed := ns.candidates(reqs)
	if !indexed {
		candidates = ns.pods
	}
	for _, p := range candidates {
		if sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out
}

// candidates returns the pods allowed by the most selective requirement
// that names values (=, ==, in), sorted by name; indexed is false when no
// requirement does.
func (ns *namespace) candidates(reqs labels.Requirements) (pods []*Pod, indexed bool) {
	best := -1
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
		default:
			continue
		}
		values := ns.labels[r.Key()]
		var set []*Pod
		vs := r.ValuesUnsorted()
		for _, v := range vs {
			set = append(set, values[v]...)
		}
		if len(vs) > 1 {
			slices.SortFunc(set, func(a, b *Pod) int { return strings.Compare(a.Name, b.Name) })
			set = slices.Compact(set) // a value given twice
		}
		if best < 0 || len(set) < best {
			pods, best = set, len(set)
		}
		if best == 0 {
			break
		}
	}
	return pods, best >= 0
}
