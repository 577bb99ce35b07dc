package podcache

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// Cache runs the pod, node and LeaderWorkerSet StatefulSet informers and
// keeps their indexes. Nothing is watched until Start.
type Cache struct {
	factory informers.SharedInformerFactory
	// meta runs the informer on the metadata of the LeaderWorkerSet
	// StatefulSets, which group membership is verified against.
	meta   metadatainformer.SharedInformerFactory
	podInf cache.SharedIndexInformer
	pods   *PodIndex
	nodes  *NodeIndex
	synced []cache.InformerSynced
}

// New returns a Cache of the cluster's unfinished pods and its nodes, both
// trimmed (TrimPod, TrimNode), whose pod index verifies LeaderWorkerSet
// group membership against the StatefulSets of every LeaderWorkerSet,
// watched through meta as metadata only. It registers the cache's
// self-metrics.
func New(client kubernetes.Interface, meta metadata.Interface) (*Cache, error) {
	if meta == nil {
		return nil, errors.New("pod cache: no metadata client to watch LeaderWorkerSet StatefulSets with")
	}
	RegisterMetrics()
	sets := newStatefulSets()
	c := &Cache{pods: newPodIndex(sets), nodes: NewNodeIndex()}
	c.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trim))
	c.podInf = c.factory.InformerFor(&corev1.Pod{}, newPodInformer)
	podReg, err := c.podInf.AddEventHandler(podHandler(c.pods))
	if err != nil {
		return nil, err
	}
	nodeReg, err := c.factory.Core().V1().Nodes().Informer().AddEventHandler(nodeHandler(c.nodes))
	if err != nil {
		return nil, err
	}
	c.meta = metadatainformer.NewFilteredSharedInformerFactory(meta, 0, metav1.NamespaceAll, lwsStatefulSets)
	setInf := c.meta.ForResource(statefulSetsResource).Informer()
	if err := setInf.SetTransform(trimStatefulSet); err != nil {
		return nil, err
	}
	setReg, err := setInf.AddEventHandler(statefulSetHandler(sets, c.pods))
	if err != nil {
		return nil, err
	}
	// Synced once the indexes have every object of the informers' first
	// lists, not only the informers.
	c.synced = []cache.InformerSynced{podReg.HasSynced, nodeReg.HasSynced, setReg.HasSynced}
	return c, nil
}

// Pods is the pod index.
func (c *Cache) Pods() *PodIndex { return c.pods }

// Nodes is the node index.
func (c *Cache) Nodes() *NodeIndex { return c.nodes }

// OnPodStarted calls started with the node of every pod that starts running
// after the informer's initial list (whose pods a first scrape covers).
// Call it before Start.
func (c *Cache) OnPodStarted(started func(node string)) error {
	_, err := c.podInf.AddEventHandler(startedPods(started))
	return err
}

// Start starts the informers and waits until the indexes hold their first
// lists, or ctx ends. Stop them with Shutdown.
func (c *Cache) Start(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	c.meta.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return errors.New("pod, node and StatefulSet caches did not sync")
	}
	return nil
}

// Shutdown stops the informers and waits for them.
func (c *Cache) Shutdown() {
	c.factory.Shutdown()
	c.meta.Shutdown()
}

// podFieldSelector leaves out pods that have finished: they have no usage
// and would only grow the cache.
var podFieldSelector = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
).String()

// newPodInformer watches pods that have not finished. Its store has no
// index: the PodIndex is the cache's index.
func newPodInformer(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
	return coreinformers.NewFilteredPodInformer(client, metav1.NamespaceAll, resync, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = podFieldSelector })
}

func trim(obj any) (any, error) {
	switch obj.(type) {
	case *corev1.Pod:
		return TrimPod(obj)
	case *corev1.Node:
		return TrimNode(obj)
	}
	return obj, nil
}

func podHandler(x *PodIndex) cache.ResourceEventHandler {
	set := func(obj any) {
		if p, ok := obj.(*Pod); ok {
			x.Set(p)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if ns, name, ok := deletedKey(obj); ok {
				x.Delete(ns, name)
			}
		},
	}
}

func nodeHandler(x *NodeIndex) cache.ResourceEventHandler {
	set := func(obj any) {
		if n, ok := obj.(*Node); ok {
			x.Set(n)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if _, name, ok := deletedKey(obj); ok {
				x.Delete(name)
			}
		},
	}
}

// deletedKey is the namespace and name of a deleted object or tombstone.
func deletedKey(obj any) (namespace, name string, ok bool) {
	if t, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
		ns, n, err := cache.SplitMetaNamespaceKey(t.Key)
		return ns, n, err == nil
	}
	m, isMeta := obj.(metav1.Object)
	if !isMeta {
		return "", "", false
	}
	return m.GetNamespace(), m.GetName(), true
}

// startedPods calls started with the node of every pod that starts running
// after the informer's initial list.
func startedPods(started func(node string)) cache.ResourceEventHandler {
	running := func(obj any) (string, bool) {
		pod, ok := obj.(*Pod)
		if !ok || pod.NodeName() == "" || pod.Phase() != corev1.PodRunning {
			return "", false
		}
		return pod.NodeName(), true
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initialList bool) {
			if node, ok := running(obj); ok && !initialList {
				started(node)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if _, was := running(oldObj); was {
				return
			}
			if node, ok := running(newObj); ok {
				started(node)
			}
		},
	}
}
