package podcache

import (
	"maps"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

var (
	inferencePoolsResource   = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}
	leaderWorkerSetsResource = schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}
)

// Pools knows which of an inference gateway's InferencePools front which
// LeaderWorkerSet: a pool fronts a LeaderWorkerSet of its namespace when its
// selector matches the labels the LeaderWorkerSet's leader pods, or its
// worker pods, are created with: their template's labels and the
// LeaderWorkerSet's name label (and worker index 0 for a leader). It reads
// templates, not pods, so that it holds at zero groups, when the pool's
// demand is what brings the first group back.
//
// It watches both kinds, trimmed to names and those labels, and starts
// only where endpoint pickers are configured. A kind the cluster does not
// serve (no CRD) leaves Fronting unknown; the server stays ready.
type Pools struct {
	factory     dynamicinformer.DynamicSharedInformerFactory
	pools, sets cache.SharedIndexInformer
}

// NewPools returns the Pools of the cluster dyn reaches; nothing is watched
// until Start.
func NewPools(dyn dynamic.Interface) (*Pools, error) {
	p := &Pools{factory: dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)}
	p.pools = p.factory.ForResource(inferencePoolsResource).Informer()
	p.sets = p.factory.ForResource(leaderWorkerSetsResource).Informer()
	for inf, trim := range map[cache.SharedIndexInformer]cache.TransformFunc{p.pools: trimPool, p.sets: trimLWSTemplates} {
		if err := inf.SetTransform(trim); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Start starts the informers and returns; they run until stop closes.
func (p *Pools) Start(stop <-chan struct{}) { p.factory.Start(stop) }

// Fronting returns the names of the InferencePools that front the
// LeaderWorkerSet namespace/name, sorted; known is false while the
// LeaderWorkerSet is not known (not synced yet, or no such object).
func (p *Pools) Fronting(namespace, name string) (pools []string, known bool) {
	obj, ok, err := p.sets.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	t := obj.(*lwsTemplates)
	for _, o := range p.pools.GetStore().List() {
		pl := o.(*inferencePool)
		if pl.Namespace == namespace && (pl.selector.Matches(t.leader) || pl.selector.Matches(t.worker)) {
			pools = append(pools, pl.Name)
		}
	}
	sort.Strings(pools)
	return pools, true
}

// inferencePool is a cached InferencePool: its name and selector.
type inferencePool struct {
	metav1.ObjectMeta
	// selector is spec.selector.matchLabels (the v1 API has nothing else);
	// labels.Nothing when it has none.
	selector labels.Selector
}

func (p *inferencePool) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object; an inferencePool is never
// modified.
func (p *inferencePool) DeepCopyObject() runtime.Object { c := *p; return &c }

// lwsTemplates is a cached LeaderWorkerSet: its name and the labels its
// leader and worker pods are created with.
type lwsTemplates struct {
	metav1.ObjectMeta
	leader, worker labels.Set
}

func (t *lwsTemplates) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object; an lwsTemplates is never
// modified.
func (t *lwsTemplates) DeepCopyObject() runtime.Object { c := *t; return &c }

// identity keeps what a cache key needs of an object.
func identity(u *unstructured.Unstructured) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()}
}

// trimPool is the informer's transform of an InferencePool
// (gateway-api-inference-extension api/v1/inferencepool_types.go:
// spec.selector.matchLabels).
func trimPool(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a deletion tombstone
	}
	m, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	sel := labels.Nothing()
	if len(m) > 0 {
		sel = labels.SelectorFromValidatedSet(m)
	}
	return &inferencePool{ObjectMeta: identity(u), selector: sel}, nil
}

// trimLWSTemplates is the informer's transform of a LeaderWorkerSet
// (sigs.k8s.io/lws api/leaderworkerset/v1: spec.leaderWorkerTemplate's
// leaderTemplate, which the leader takes when set, and workerTemplate).
// The controller adds its own labels to each pod; of them, the name is on
// every pod and worker index 0 on the leader.
func trimLWSTemplates(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	worker, _, _ := unstructured.NestedStringMap(u.Object, "spec", "leaderWorkerTemplate", "workerTemplate", "metadata", "labels")
	leader, found, _ := unstructured.NestedStringMap(u.Object, "spec", "leaderWorkerTemplate", "leaderTemplate", "metadata", "labels")
	if !found {
		leader = maps.Clone(worker)
	}
	if leader == nil {
		leader = map[string]string{}
	}
	if worker == nil {
		worker = map[string]string{}
	}
	for _, l := range []map[string]string{leader, worker} {
		for k := range l {
			if strings.HasPrefix(k, "leaderworkerset.sigs.k8s.io/") {
				delete(l, k) // the controller's to set, not the template's
			}
		}
		l[group.LabelName] = u.GetName()
	}
	leader[group.LabelWorkerIndex] = "0"
	return &lwsTemplates{ObjectMeta: identity(u), leader: leader, worker: worker}, nil
}
