package podcache

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// statefulSetsResource is what the StatefulSet informer watches: metadata
// only (PartialObjectMetadata), so no spec or status is ever decoded.
var statefulSetsResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}

// lwsStatefulSets restricts the StatefulSet informer to the StatefulSets
// that carry the LeaderWorkerSet name label: the LeaderWorkerSet
// controller puts it on the leader StatefulSet and on every worker
// StatefulSet.
func lwsStatefulSets(o *metav1.ListOptions) { o.LabelSelector = group.LabelName }

// statefulSet is one cached StatefulSet: its identity and its controller
// reference, nothing else. It is what the StatefulSet informer stores
// (trimStatefulSet makes it); read-only.
type statefulSet struct {
	// ObjectMeta keeps namespace, name, UID and resource version.
	metav1.ObjectMeta
	// controller is the StatefulSet's controller reference, nil when it
	// has none.
	controller *ownerRef
}

// ownerRef is the part of a controller reference that verification reads.
type ownerRef struct {
	// Group is the API group of the reference's apiVersion ("" for core).
	Group, Kind, Name string
	UID               types.UID
}

var (
	_ metav1.Object  = &statefulSet{}
	_ runtime.Object = &statefulSet{}
)

// GetObjectKind implements runtime.Object.
func (s *statefulSet) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object; a statefulSet is never
// modified.
func (s *statefulSet) DeepCopyObject() runtime.Object {
	c := *s
	return &c
}

// newStatefulSet makes the statefulSet of an object's metadata.
func newStatefulSet(m metav1.Object) *statefulSet {
	s := &statefulSet{ObjectMeta: metav1.ObjectMeta{
		Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
	}}
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err == nil {
			s.controller = &ownerRef{Group: gv.Group, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}
		}
		// An unparsable apiVersion names no controller this server knows:
		// the StatefulSet counts as controlled by nothing.
	}
	return s
}

// trimStatefulSet is the StatefulSet informer's transform: the metadata of
// a StatefulSet becomes the statefulSet the cache stores. Anything else
// passes through (tombstones and the like).
func trimStatefulSet(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return newStatefulSet(m), nil
	}
	return obj, nil
}

// statefulSets holds the LeaderWorkerSet StatefulSets by namespace and
// name. The StatefulSet informer of a Cache feeds it. Safe for concurrent
// use.
type statefulSets struct {
	mu     sync.RWMutex
	byName map[types.NamespacedName]*statefulSet
}

func newStatefulSets() *statefulSets {
	return &statefulSets{byName: map[types.NamespacedName]*statefulSet{}}
}

// set adds s or replaces the StatefulSet of its namespace and name;
// changed says whether what verification reads of it (UID, controller)
// changed. Most updates change neither: a StatefulSet's status moves its
// resource version.
func (x *statefulSets) set(s *statefulSet) (changed bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	old := x.byName[key]
	x.byName[key] = s
	return old == nil || old.UID != s.UID || !sameRef(old.controller, s.controller)
}

func sameRef(a, b *ownerRef) bool { return a == b || (a != nil && b != nil && *a == *b) }

// delete removes the StatefulSet namespace/name; deleted says whether it
// was there.
func (x *statefulSets) delete(namespace, name string) (deleted bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	key := types.NamespacedName{Namespace: namespace, Name: name}
	_, deleted = x.byName[key]
	delete(x.byName, key)
	return deleted
}

// get returns the StatefulSet namespace/name, nil when none is cached.
func (x *statefulSets) get(namespace, name string) *statefulSet {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.byName[types.NamespacedName{Namespace: namespace, Name: name}]
}

// statefulSetHandler keeps x, and moves on the version of pods' namespace
// whenever a change of x may change who belongs to its groups, so that
// what a reader derived from the namespace's pods (Pods.Version) is made
// again.
func statefulSetHandler(x *statefulSets, pods *PodIndex) cache.ResourceEventHandler {
	set := func(obj any) {
		if s, ok := obj.(*statefulSet); ok && x.set(s) {
			pods.touch(s.Namespace)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if ns, name, ok := deletedKey(obj); ok && x.delete(ns, name) {
				pods.touch(ns)
			}
		},
	}
}
