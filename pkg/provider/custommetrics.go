package provider

import (
	"context"
	"fmt"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
)

// Group metrics served on custom.metrics.k8s.io, for a leader pod (its
// group) and for a LeaderWorkerSet (all its groups). Usage is in cores or
// bytes; utilization is Σusage / Σrequest over the pods that have both, as
// a plain number (0.7 = 70%).
const (
	MetricCPUUsage          = "lws_group_cpu_usage"
	MetricMemoryUsage       = "lws_group_memory_usage"
	MetricCPUUtilization    = "lws_group_cpu_utilization"
	MetricMemoryUtilization = "lws_group_memory_utilization"
)

var (
	podsResource = schema.GroupResource{Resource: "pods"}
	// LWSResource is how the HPA names LeaderWorkerSets in a
	// custom-metrics request.
	LWSResource = schema.GroupResource{Group: "leaderworkerset.x-k8s.io", Resource: "leaderworkersets"}

	metricNames = []string{MetricCPUUsage, MetricMemoryUsage, MetricCPUUtilization, MetricMemoryUtilization}
)

// CustomMetrics serves group metrics; it implements the
// custom-metrics-apiserver provider interface over a Provider.
type CustomMetrics struct {
	p *Provider
	// endpoints, when set (WithEndpoints), serves the pod-endpoint
	// metrics too (endpointmetrics.go).
	endpoints *endpointMetrics
}

var _ cmprovider.CustomMetricsProvider = &CustomMetrics{}

// CustomMetrics returns the custom metrics view of p. It needs p's group
// index.
func (p *Provider) CustomMetrics() *CustomMetrics { return &CustomMetrics{p: p} }

// ListAllMetrics lists the pod-endpoint metrics on pods, and while some
// LeaderWorkerSet pod exists the group metrics and the pod-endpoint
// metrics on LeaderWorkerSets too.
func (c *CustomMetrics) ListAllMetrics() []cmprovider.CustomMetricInfo {
	hasGroups := c.p.groups && c.p.pods.HasGroups()
	out := c.endpoints.infos(hasGroups)
	if !hasGroups {
		return out
	}
	for _, gr := range []schema.GroupResource{podsResource, LWSResource} {
		for _, m := range metricNames {
			out = append(out, cmprovider.CustomMetricInfo{GroupResource: gr, Namespaced: true, Metric: m})
		}
	}
	return out
}

// GetMetricByName implements cmprovider.CustomMetricsProvider. The metrics
// are namespaced and carry no labels: a root-scoped request is NotFound, and
// a metricLabelSelector that an empty label set does not match selects
// nothing.
func (c *CustomMetrics) GetMetricByName(_ context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValue, error) {
	if c.endpoints.serves(info.Metric) {
		return c.endpointByName(name, info, metricSelector)
	}
	if err := checkMetric(info); err != nil {
		return nil, err
	}
	if !info.Namespaced || name.Namespace == "" {
		return nil, notFoundWhy(info, name.Name, "group metrics are namespaced: ask in the namespace of the "+info.GroupResource.String())
	}
	if !selectsUnlabelled(metricSelector) {
		return nil, notFoundWhy(info, name.Name, fmt.Sprintf("metricLabelSelector %q matches no series: group metrics carry no labels", metricSelector))
	}
	switch info.GroupResource {
	case podsResource:
		pod, ok := c.p.pods.Pod(name.Namespace, name.Name)
		if !ok {
			return nil, cmprovider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
		}
		return c.leaderValue(pod, info)
	case LWSResource:
		pods := c.p.pods.List(name.Namespace, labels.SelectorFromSet(labels.Set{group.LabelName: name.Name}))
		if len(pods) == 0 {
			return nil, notFoundWhy(info, name.Name, "no pods of this LeaderWorkerSet are known")
		}
		s := c.p.sums(pods)
		ref := custom_metrics.ObjectReference{Kind: "LeaderWorkerSet", APIVersion: "leaderworkerset.x-k8s.io/v1", Namespace: name.Namespace, Name: name.Name}
		return value(ref, info, s, name.Name)
	}
	return nil, cmprovider.NewMetricNotFoundError(info.GroupResource, info.Metric)
}

// GetMetricBySelector implements cmprovider.CustomMetricsProvider: for pods,
// the leaders among the selected pods (workers have no group metrics).
func (c *CustomMetrics) GetMetricBySelector(_ context.Context, namespace string, selector labels.Selector, info cmprovider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValueList, error) {
	if err := checkMetric(info); err != nil && !c.endpoints.serves(info.Metric) {
		return nil, err
	}
	if info.GroupResource != podsResource {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s can be read by name only", info.GroupResource))
	}
	if !info.Namespaced || namespace == "" {
		return nil, notFoundWhy(info, "*", "group metrics are namespaced: ask in the namespace of the pods")
	}
	if c.endpoints.serves(info.Metric) {
		return c.endpointBySelector(namespace, selector, info, metricSelector)
	}
	if !selectsUnlabelled(metricSelector) {
		return &custom_metrics.MetricValueList{}, nil
	}
	out := &custom_metrics.MetricValueList{}
	for _, pod := range c.p.pods.List(namespace, selector) {
		if !pod.Leader() {
			continue
		}
		if v, err := c.leaderValue(pod, info); err == nil {
			out.Items = append(out.Items, *v)
		}
	}
	return out, nil
}

// selectsUnlabelled reports whether a metricLabelSelector selects a series
// without labels, which every group metric is. A nil selector selects all.
func selectsUnlabelled(sel labels.Selector) bool {
	return sel == nil || sel.Matches(labels.Set{})
}

func checkMetric(info cmprovider.CustomMetricInfo) error {
	for _, m := range metricNames {
		if info.Metric == m {
			return nil
		}
	}
	return cmprovider.NewMetricNotFoundError(info.GroupResource, info.Metric)
}

func (c *CustomMetrics) leaderValue(pod *podcache.Pod, info cmprovider.CustomMetricInfo) (*custom_metrics.MetricValue, error) {
	if !pod.Leader() {
		return nil, notFoundWhy(info, pod.Name, "only LeaderWorkerSet leader pods have group metrics")
	}
	if why := notRunning(pod); why != "" {
		return nil, notFoundWhy(info, pod.Name, why)
	}
	key, _ := pod.GroupKey()
	ref := custom_metrics.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name}
	return value(ref, info, c.p.sums(c.p.pods.Group(key)), pod.Name)
}

func notFoundWhy(info cmprovider.CustomMetricInfo, name, why string) error {
	err := cmprovider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name)
	err.ErrStatus.Message += ": " + why
	return err
}

// groupSums adds up the usage and requests of pods that have metrics.
type groupSums struct {
	covered int
	usage   group.Usage
	// usageWithRequest and request (group.Requests' units) cover only
	// pods that request the resource, so their ratio is a utilization.
	usageWithRequest group.Usage
	request          [2]int64
	timestamp        time.Time
	window           time.Duration
}

func (p *Provider) sums(pods []*podcache.Pod) groupSums {
	var s groupSums
	for _, pod := range pods {
		u, _, why := p.podUsage(pod)
		if why != "" {
			continue
		}
		m := member(pod, &u)
		s.covered++
		for i := range group.Resources {
			s.usage[i] += m.Usage[i]
			if m.Has[i] {
				s.usageWithRequest[i] += m.Usage[i]
				s.request[i] += m.Milli[i]
			}
		}
		if s.timestamp.IsZero() || u.Timestamp.Before(s.timestamp) {
			s.timestamp = u.Timestamp
		}
		s.window = max(s.window, u.Window)
	}
	return s
}

func value(ref custom_metrics.ObjectReference, info cmprovider.CustomMetricInfo, s groupSums, name string) (*custom_metrics.MetricValue, error) {
	if s.covered == 0 {
		return nil, notFoundWhy(info, name, "no pod of the group has metrics yet")
	}
	var q resource.Quantity
	switch info.Metric {
	case MetricCPUUsage:
		q = *resource.NewScaledQuantity(s.usage[group.CPU], resource.Nano)
	case MetricMemoryUsage:
		q = *resource.NewQuantity(s.usage[group.Memory], resource.BinarySI)
	case MetricCPUUtilization, MetricMemoryUtilization:
		i := group.CPU
		if info.Metric == MetricMemoryUtilization {
			i = group.Memory
		}
		if s.request[i] <= 0 {
			return nil, notFoundWhy(info, name, "no pod of the group with metrics requests "+string(group.Resources[i]))
		}
		util := group.Utilization(i, s.usageWithRequest[i], s.request[i])
		q = *resource.NewMilliQuantity(int64(math.Round(util*1000)), resource.DecimalSI)
	}
	window := int64(s.window.Seconds())
	return &custom_metrics.MetricValue{
		DescribedObject: ref,
		Metric:          custom_metrics.MetricIdentifier{Name: info.Metric},
		Timestamp:       metav1.NewTime(s.timestamp),
		WindowSeconds:   &window,
		Value:           q,
	}, nil
}
