package hpacalc

import (
	"context"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/kubernetes/pkg/controller/podautoscaler"
	metricsclient "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	cmfake "k8s.io/metrics/pkg/client/custom_metrics/fake"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// queueMetric is the pod-endpoint metric of the scenarios: every pod
// exposes one series per running container, its CPU usage in millicores
// as a plain number; a pod's value is their sum, a leader's its group's.
const queueMetric = "queue"

var queueMetrics = []provider.EndpointMetric{{Name: queueMetric, Combine: group.CombineSum, Members: group.ScopeAll}}

// hasEndpointValue says whether a member's endpoint answers: exactly when
// its kubelet reports it in full, so that "has no usage" means the same on
// every path.
func hasEndpointValue(st state) bool {
	switch st {
	case pending, noMetrics, partial, failed:
		return false
	}
	return true
}

// queue is a member's own value of queueMetric.
func (m member) queue() int64 {
	var q int64
	for _, v := range m.cpu {
		q += v
	}
	return q
}

// queueTarget is the per-pod AverageValue target of queueMetric, in its
// plain units: the scenario's target utilization of the pods' mean CPU
// request, as the scenario's CPU usage is a utilization of each
// container's share.
func (s *scenario) queueTarget() int64 {
	var sum int64
	for _, m := range s.members {
		running := runningContainers(m.pod)
		for _, c := range running {
			sum += share(m.pod, c, corev1.ResourceCPU, len(running))
		}
	}
	return max(1, int64(s.target)*sum/int64(100*len(s.members)))
}

// endpointValues is the store holding what the pod-endpoint source
// collected for the scenario: each pod's series from its own target,
// credited to its UID.
func (s *scenario) endpointValues() *store.Store {
	at := s.now.Add(-5 * time.Second)
	st := store.New(store.Config{Clock: clocktesting.NewFakeClock(s.now), Sources: []string{"endpoints"}, StaleAfter: 2*window + 10*time.Second})
	for _, m := range s.members {
		if !hasEndpointValue(m.state) {
			continue
		}
		var points []sources.SeriesPoint
		for _, c := range runningContainers(m.pod) {
			points = append(points, sources.SeriesPoint{
				Namespace: namespace, Pod: m.pod.Name, UID: string(m.pod.UID), Container: c.Name, Metric: queueMetric,
				Series: "container=" + c.Name + "\x00", Value: float64(m.cpu[c.Name]), Timestamp: at,
			})
		}
		st.StoreSeries("endpoints", "pod/"+m.pod.Name, points, at)
	}
	return st
}

// podQueues answers reads of queueMetric by selector with every selected
// pod's own value, as a pod-endpoint adapter serves one Deployment's pods.
func (s *scenario) podQueues(_ string, selector labels.Selector, metric string, _ labels.Selector) (*custom_metrics.MetricValueList, error) {
	if metric != queueMetric {
		return nil, fmt.Errorf("metric %q is not served", metric)
	}
	out := &custom_metrics.MetricValueList{}
	windowSeconds := int64(window.Seconds())
	for _, m := range s.members {
		if !hasEndpointValue(m.state) || !selector.Matches(labels.Set(m.pod.Labels)) {
			continue
		}
		out.Items = append(out.Items, custom_metrics.MetricValue{
			DescribedObject: custom_metrics.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: m.pod.Name},
			Metric:          custom_metrics.MetricIdentifier{Name: metric},
			Timestamp:       metav1.NewTime(s.now.Add(-5 * time.Second)),
			WindowSeconds:   &windowSeconds,
			Value:           *resource.NewMilliQuantity(m.queue()*1000, resource.DecimalSI),
		})
	}
	return out, nil
}

// providerPods answers reads by selector of pod metrics through the
// server's custom metrics provider.
func providerPods(cm *provider.CustomMetrics) listFunc {
	return func(ns string, selector labels.Selector, metric string, metricSelector labels.Selector) (*custom_metrics.MetricValueList, error) {
		info := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: metric}
		return cm.GetMetricBySelector(context.Background(), ns, selector, info, metricSelector)
	}
}

// listFunc answers a read of a pod metric by selector.
type listFunc func(namespace string, selector labels.Selector, metric string, metricSelector labels.Selector) (*custom_metrics.MetricValueList, error)

// customMetrics is custom.metrics.k8s.io as the HPA's REST metrics client
// reads it, in v1beta2: a Pods metric by selector through list, an Object
// metric by name through cm (either nil: not served). The HPA's metric
// selector is always labels.Everything(); the fake client drops it.
func customMetrics(list listFunc, cm *provider.CustomMetrics) *cmfake.FakeCustomMetricsClient {
	client := &cmfake.FakeCustomMetricsClient{}
	client.AddReactor("*", "*", func(action core.Action) (bool, runtime.Object, error) {
		get := action.(cmfake.GetForAction)
		switch {
		case get.GetName() != "*" && cm != nil:
			// The fake names the object's resource as its group resource,
			// "leaderworkersets.leaderworkerset.x-k8s.io".
			info := cmprovider.CustomMetricInfo{GroupResource: schema.ParseGroupResource(get.GetResource().Resource), Namespaced: true, Metric: get.GetMetricName()}
			v, err := cm.GetMetricByName(context.Background(), types.NamespacedName{Namespace: get.GetNamespace(), Name: get.GetName()}, info, labels.Everything())
			if err != nil {
				return true, nil, fmt.Errorf("%s %s: %w", get.GetResource(), get.GetName(), err)
			}
			out := &v1beta2.MetricValueList{Items: make([]v1beta2.MetricValue, 1)}
			return true, out, v1beta2.Convert_custom_metrics_MetricValue_To_v1beta2_MetricValue(v, &out.Items[0], nil)
		case get.GetResource().Resource != "pods" || get.GetName() != "*" || list == nil:
			return true, nil, fmt.Errorf("%s %s: only reads of pods by selector are served", get.GetResource(), get.GetName())
		}
		in, err := list(get.GetNamespace(), get.GetLabelSelector(), get.GetMetricName(), labels.Everything())
		if err != nil {
			return true, nil, err
		}
		out := &v1beta2.MetricValueList{}
		return true, out, v1beta2.Convert_custom_metrics_MetricValueList_To_v1beta2_MetricValueList(in, out, nil)
	})
	return client
}

// metricReplicas runs the HPA's calculator for a Pods metric with an
// AverageValue target in milli-units, as the HPA controller reads it
// through its REST metrics client.
func metricReplicas(lister corelisters.PodLister, list listFunc, current int32, target int64, metric string, sel labels.Selector) reading {
	calc := podautoscaler.NewReplicaCalculator(metricsclient.NewRESTMetricsClient(nil, customMetrics(list, nil), nil),
		lister, cpuInitializationPeriod, initialReadinessDelay)
	replicas, usage, _, err := calc.GetMetricReplicas(current, target, metric, podautoscaler.Tolerances{}, namespace, sel, labels.Everything())
	return reading{replicas: replicas, usage: usage, err: err}
}

// desiredAt is what the HPA wants from current replicas that all count at
// face value at ratio (current / target), with zero tolerances.
func desiredAt(ratio float64, current int32) int32 {
	if ratio == 1 {
		return current
	}
	return int32(math.Ceil(ratio * float64(current)))
}

func itemNames(items []custom_metrics.MetricValue) []string {
	out := make([]string, len(items))
	for i, v := range items {
		out[i] = v.DescribedObject.Name
	}
	return out
}
