package server

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// newPodInformer watches pods that have not finished.
func newPodInformer(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
	tweak := func(o *metav1.ListOptions) { o.FieldSelector = podFieldSelector }
	return cache.NewSharedIndexInformer(
		&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				tweak(&o)
				return client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				tweak(&o)
				return client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
			},
		},
		&corev1.Pod{}, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	)
}

func corelistersPod(inf cache.SharedIndexInformer) corelisters.PodLister {
	return corelisters.NewPodLister(inf.GetIndexer())
}
