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
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/kubernetes/pkg/controller/podautoscaler"
	metricsclient "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	customclient "k8s.io/metrics/pkg/client/custom_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources/promscrape"
)

// queueMetric is the pod-endpoint metric of the scenarios: every pod
// exposes one series per running container, its CPU usage in millicores
// as a plain number; a pod's value is their sum, a leader's its group's.
const queueMetric = "queue"

var queueMetrics = []promscrape.Metric{{
	Name: queueMetric, Series: "app_queue_length", Type: promscrape.Gauge, Combine: promscrape.CombineSum, Members: group.ScopeAll,
}}

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

// endpointValues are what the pod-endpoint source collected for the
// scenario: its samples collated as promscrape does, each pod's values
// kept for its UID.
func (s *scenario) endpointValues() endpointValues {
	var samples []promscrape.Sample
	for _, m := range s.members {
		if !hasEndpointValue(m.state) {
			continue
		}
		for _, c := range runningContainers(m.pod) {
			samples = append(samples, promscrape.Sample{
				Metric: 0, Namespace: namespace, Pod: m.pod.Name, Container: c.Name,
				Series: "container=" + c.Name + "\x00", Value: float64(m.cpu[c.Name]), Timestamp: s.now.Add(-5 * time.Second),
			})
		}
	}
	uids := map[string]string{}
	for _, m := range s.members {
		uids[m.pod.Name] = string(m.pod.UID)
	}
	out := endpointValues{}
	for _, p := range promscrape.Collate(queueMetrics, samples).Pods {
		p.UID = uids[p.Name]
		out[p.Namespace+"/"+p.Name] = p
	}
	return out
}

// endpointValues is the pod-endpoint store as the provider reads it: a
// pod's values only for the pod of their UID.
type endpointValues map[string]promscrape.PodValues

var _ provider.EndpointValues = endpointValues{}

func (e endpointValues) Value(namespace, name, uid, metric string) (promscrape.Value, bool) {
	p, ok := e[namespace+"/"+name]
	if !ok || p.UID != uid {
		return promscrape.Value{}, false
	}
	for _, v := range p.Values {
		if v.Metric == metric {
			return v, true
		}
	}
	return promscrape.Value{}, false
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
// reads it for a Pods metric: by selector, in v1beta2.
type customMetrics struct{ list listFunc }

var _ customclient.CustomMetricsClient = customMetrics{}

func (c customMetrics) RootScopedMetrics() customclient.MetricsInterface {
	return namespacedMetrics{list: c.list}
}

func (c customMetrics) NamespacedMetrics(ns string) customclient.MetricsInterface {
	return namespacedMetrics{list: c.list, namespace: ns}
}

type namespacedMetrics struct {
	list      listFunc
	namespace string
}

func (n namespacedMetrics) GetForObject(gk schema.GroupKind, name, metric string, _ labels.Selector) (*v1beta2.MetricValue, error) {
	return nil, fmt.Errorf("%s %s: only reads of pods by selector are served", gk, name)
}

func (n namespacedMetrics) GetForObjects(gk schema.GroupKind, selector labels.Selector, metric string, metricSelector labels.Selector) (*v1beta2.MetricValueList, error) {
	if gk != (schema.GroupKind{Kind: "Pod"}) {
		return nil, fmt.Errorf("%s: only pods are served", gk)
	}
	in, err := n.list(n.namespace, selector, metric, metricSelector)
	if err != nil {
		return nil, err
	}
	out := &v1beta2.MetricValueList{}
	if err := v1beta2.Convert_custom_metrics_MetricValueList_To_v1beta2_MetricValueList(in, out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// reading is what one run of the HPA's calculator gave: the desired
// replicas and the current value it read, a utilization in percent
// (Resource) or an average in milli-units (Pods).
type reading struct {
	replicas int32
	usage    int64
	err      error
}

func (r reading) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("%d replicas at %d", r.replicas, r.usage)
}

// metricReplicas runs the HPA's calculator for a Pods metric with an
// AverageValue target in milli-units, as the HPA controller reads it
// through its REST metrics client.
func metricReplicas(lister corelisters.PodLister, list listFunc, current int32, target int64, metric string, sel labels.Selector) reading {
	calc := podautoscaler.NewReplicaCalculator(metricsclient.NewRESTMetricsClient(nil, customMetrics{list: list}, nil),
		lister, cpuInitializationPeriod, initialReadinessDelay)
	replicas, usage, _, err := calc.GetMetricReplicas(current, target, metric, podautoscaler.Tolerances{}, namespace, sel, labels.Everything())
	return reading{replicas: replicas, usage: usage, err: err}
}

// faceValueReplicas is calculate with the readiness rule off (both of its
// periods zero), as the HPA counts pods for any metric but Resource CPU:
// every Running pod with a value at face value.
func faceValueReplicas(lister corelisters.PodLister, metrics []metricsv1beta1.PodMetrics, current, target int32, r corev1.ResourceName, sel labels.Selector) reading {
	d := calculateWith(lister, metrics, current, target, r, sel, 0, 0)
	return reading{replicas: d.replicas, usage: int64(d.utilization), err: d.err}
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
