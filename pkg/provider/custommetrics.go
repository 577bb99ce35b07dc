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
	// InferencePoolResource is the inference gateway's pool
	// (gateway-api-inference-extension api/v1/inferencepool_types.go),
	// whose endpoint pickers' metrics are served on it.
	InferencePoolResource = schema.GroupResource{Group: "inference.networking.k8s.io", Resource: "inferencepools"}

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
		var pods []*podcache.Pod
		for _, l := range c.p.pods.List(name.Namespace, labels.SelectorFromSet(labels.Set{group.LabelName: name.Name, group.LabelWorkerIndex: "0"})) {
			if key, ok := l.GroupKey(); ok && c.p.pods.Leads(l) {
				pods = append(pods, c.p.pods.Group(key)...)
			}
		}
		g := c.p.groupUsage(pods)
		if len(pods) == 0 {
			// Scaled to zero groups, or unknown: the usage (a sum) of a
			// LeaderWorkerSet the cache knows is 0; its utilization, a
			// ratio of nothing, has no value.
			if !c.p.pods.LeaderWorkerSet(name.Namespace, name.Name) {
				return nil, notFoundWhy(info, name.Name, "no pods of this LeaderWorkerSet are known")
			}
			g.timestamp = c.p.clock.Now()
		}
		ref := custom_metrics.ObjectReference{Kind: "LeaderWorkerSet", APIVersion: "leaderworkerset.x-k8s.io/v1", Namespace: name.Namespace, Name: name.Name}
		return value(ref, info, g, name.Name)
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
		if !c.p.pods.Leads(pod) {
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
	if !c.p.pods.Leads(pod) {
		return nil, notFoundWhy(info, pod.Name, "only LeaderWorkerSet leader pods have group metrics")
	}
	if why := notRunning(pod); why != "" {
		return nil, notFoundWhy(info, pod.Name, why)
	}
	key, _ := pod.GroupKey()
	ref := custom_metrics.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name}
	return value(ref, info, c.p.groupUsage(c.p.pods.Group(key)), pod.Name)
}

func notFoundWhy(info cmprovider.CustomMetricInfo, name, why string) error {
	err := cmprovider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name)
	err.ErrStatus.Message += ": " + why
	return err
}

// groupUsage is a set of pods' CPU and memory as the group rule reads
// them: one group.Value per pod and resource, classified as the HPA
// counts the pod, with the oldest sample's time and the widest window of
// those counted.
type groupUsage struct {
	values    [2][]group.Value
	timestamp time.Time
	window    time.Duration
}

func (p *Provider) groupUsage(pods []*podcache.Pod) groupUsage {
	var g groupUsage
	for _, pod := range pods {
		u, _, why := p.podUsage(pod)
		var m group.Member
		state := group.Classify(pod.Phase(), pod.Deleting(), why == "")
		if state == group.Counted {
			m = member(pod, &u)
			if g.timestamp.IsZero() || u.Timestamp.Before(g.timestamp) {
				g.timestamp = u.Timestamp
			}
			g.window = max(g.window, u.Window)
		}
		for i := range group.Resources {
			v := m.Value(pod.Name, i)
			v.State = state
			g.values[i] = append(g.values[i], v)
		}
	}
	return g
}

// value is one group metric of g: usage is the sum, utilization the ratio
// of the sums (group.CombineSum, group.CombineRatio), and there is none
// while any pod is not counted (group.State).
func value(ref custom_metrics.ObjectReference, info cmprovider.CustomMetricInfo, g groupUsage, name string) (*custom_metrics.MetricValue, error) {
	r, rule := group.CPU, group.CombineSum
	switch info.Metric {
	case MetricMemoryUsage:
		r = group.Memory
	case MetricCPUUtilization:
		rule = group.CombineRatio
	case MetricMemoryUtilization:
		r, rule = group.Memory, group.CombineRatio
	}
	v, err := rule.Of(g.values[r])
	if err != nil {
		return nil, notFoundWhy(info, name, "the group has no value: "+err.Error())
	}
	var q resource.Quantity
	switch info.Metric {
	case MetricCPUUsage:
		q = *resource.NewScaledQuantity(int64(math.Round(v)), resource.Nano)
	case MetricMemoryUsage:
		q = *resource.NewQuantity(int64(math.Round(v)), resource.BinarySI)
	default:
		q = *resource.NewMilliQuantity(milli(v), resource.DecimalSI)
	}
	window := int64(g.window.Seconds())
	return &custom_metrics.MetricValue{
		DescribedObject: ref,
		Metric:          custom_metrics.MetricIdentifier{Name: info.Metric},
		Timestamp:       metav1.NewTime(g.timestamp),
		WindowSeconds:   &window,
		Value:           q,
	}, nil
}

// milli is v in thousandths, rounded, the way the HPA reads a value
// (MilliValue), clamped to int64's range: a finite value too large for a
// Quantity must not wrap around to a negative one.
func milli(v float64) int64 {
	switch m := math.Round(v * 1000); {
	case m >= math.MaxInt64:
		return math.MaxInt64
	case m <= math.MinInt64:
		return math.MinInt64
	default:
		return int64(m)
	}
}
