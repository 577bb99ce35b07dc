package server

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// newPodInformer watches pods that have not finished, indexed by namespace
// and by LeaderWorkerSet group.
func newPodInformer(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
	return coreinformers.NewFilteredPodInformer(client, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, group.IndexName: group.IndexFunc},
		func(o *metav1.ListOptions) { o.FieldSelector = podFieldSelector })
}

func podLister(inf cache.SharedIndexInformer) corelisters.PodLister {
	return corelisters.NewPodLister(inf.GetIndexer())
}
