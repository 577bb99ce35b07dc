package hpacalc

import (
	"context"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/kubernetes/pkg/controller/podautoscaler"
	metricsclient "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
	"k8s.io/utils/ptr"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// TestObjectMetricAtZero runs the HPA's calculator for an Object metric on
// a LeaderWorkerSet, the way an HPA with minReplicas: 0 reads it
// (GetObjectMetricReplicas and getUsageRatioReplicaCount in
// k8s.io/kubernetes v1.37.2 pkg/controller/podautoscaler/
// replica_calculator.go: at zero replicas it wants ceil(value / target),
// tolerance and ready pods aside), against the server's provider over a pod
// cache that watches the LeaderWorkerSet's StatefulSets.
func TestObjectMetricAtZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const target = 5000 // a queue of 5 per replica, in milli-units
	// idle: scaled to zero, its leader StatefulSet alone. starting: one
	// group whose leader is Pending. ghost: no StatefulSet at all.
	lwsSet := func(name string) runtime.Object {
		return &metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-sts-" + name),
				Labels: map[string]string{group.LabelName: name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "leaderworkerset.x-k8s.io/v1", Kind: "LeaderWorkerSet",
					Name: name, UID: types.UID("uid-lws-" + name), Controller: ptr.To(true)}}},
		}
	}
	pending := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "starting-0", UID: "uid-starting-0",
			Labels:          map[string]string{group.LabelName: "starting", group.LabelGroupIndex: "0", group.LabelWorkerIndex: "0", group.LabelGroupKey: "key-starting-0"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "starting", UID: "uid-sts-starting", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "engine"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset(pending)
	cache, err := podcache.New(kube, metadatafake.NewSimpleMetadataClient(scheme, lwsSet("idle"), lwsSet("starting")))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		cache.Shutdown()
	}()
	if err := cache.Start(ctx); err != nil {
		t.Fatal(err)
	}
	values := store.New(store.Config{Sources: []string{"endpoints"}, StaleAfter: time.Minute})
	// Endpoint pickers: busy's holds 12 requests, idle's none; nothing
	// reads down's (the gateway is down).
	busy, idle := sources.ObjectKey(sources.InferencePools, "busy"), sources.ObjectKey(sources.InferencePools, "idle")
	now := time.Now()
	const poolQueue = "gateway-queue"
	values.StoreSeries("endpoints", "picker/busy", []sources.SeriesPoint{{Namespace: namespace, Pod: busy}, {Namespace: namespace, Pod: busy, Metric: poolQueue, Value: 12, Timestamp: now}}, now)
	values.StoreSeries("endpoints", "picker/idle", []sources.SeriesPoint{{Namespace: namespace, Pod: idle}}, now)
	p := provider.New(provider.Config{Pods: cache.Pods(), Nodes: podcache.NewNodeIndex(), Usage: values, Groups: true, DefaultPolicy: group.PolicyGroup})
	metrics := append(append([]provider.EndpointMetric(nil), queueMetrics...), provider.EndpointMetric{Name: poolQueue, Combine: group.CombineSum, OnPools: true})
	cm := p.CustomMetrics().WithEndpoints(values, metrics, window)

	factory := informers.NewSharedInformerFactory(kube, 0)
	podLister := factory.Core().V1().Pods().Lister()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	calc := podautoscaler.NewReplicaCalculator(metricsclient.NewRESTMetricsClient(nil, customMetrics(nil, cm), nil), podLister, cpuInitializationPeriod, initialReadinessDelay)

	for _, tc := range []struct {
		name, lws string
		// pool names an InferencePool to read instead of the LWS.
		pool            string
		current         int32
		want, wantMilli int32
		wantErr         string
	}{
		// The sum of no group's queue is 0: the HPA keeps it at zero, and
		// would leave zero at the first unit of demand on this metric.
		{name: "scaled to zero stays at zero", lws: "idle", current: 0, want: 0},
		// A group not yet running has no value: the HPA does not act.
		{name: "all pods Pending", lws: "starting", current: 1, wantErr: "member starting-0 is unready"},
		{name: "unknown LeaderWorkerSet", lws: "ghost", current: 0, wantErr: "no leader pod of this LeaderWorkerSet is known"},
		// The demand at zero, on the gateway's pool: none while nothing
		// is queued, ceil(12 / 5) groups for 12 requests, and no value at
		// all while the picker cannot be read, so that the HPA neither
		// scales up nor (with the LWS's 0 beside it) down on missing data.
		{name: "gateway pool, nothing queued", lws: "idle", pool: "idle", current: 0, want: 0},
		{name: "gateway pool, 12 requests queued", lws: "idle", pool: "busy", current: 0, want: 3, wantMilli: 12000},
		{name: "gateway metric missing", lws: "idle", pool: "down", current: 0, wantErr: "no endpoint picker of this InferencePool has been read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := &autoscalingv2.CrossVersionObjectReference{APIVersion: "leaderworkerset.x-k8s.io/v1", Kind: "LeaderWorkerSet", Name: tc.lws}
			metric := queueMetric
			if tc.pool != "" {
				ref = &autoscalingv2.CrossVersionObjectReference{APIVersion: "inference.networking.k8s.io/v1", Kind: "InferencePool", Name: tc.pool}
				metric = poolQueue
			}
			sel := labels.SelectorFromSet(labels.Set{group.LabelName: tc.lws})
			got, usage, _, err := calc.GetObjectMetricReplicas(tc.current, target, metric, podautoscaler.Tolerances{}, namespace, ref, sel, labels.Everything())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("replicas %d (usage %d), error %v; want an error with %q", got, usage, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || usage != int64(tc.wantMilli) {
				t.Errorf("replicas %d, usage %d, err %v; want %d replicas of usage %d", got, usage, err, tc.want, tc.wantMilli)
			}
		})
	}
}
