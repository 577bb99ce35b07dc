package provider

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// EndpointValues is the store as the provider reads the named series of
// pods' endpoints and node exporters: the fresh series of a served metric
// credited to the pod of a UID ("" for any), each series once. Safe for
// concurrent use.
type EndpointValues interface {
	Series(namespace, name, uid, metric string) []store.NamedValue
	// Credited reports whether a fresh target speaks for the pod or object
	// (sources.ObjectKey), with or without series there.
	Credited(namespace, name string) bool
}

// EndpointMetric is a served metric of pods' endpoints, as the provider
// serves it.
type EndpointMetric struct {
	Name string
	// Combine is the rule that combines a pod's series, and a group's
	// members.
	Combine group.Combine
	// Members is which members of a LeaderWorkerSet group count.
	Members group.Scope
	// Estimate, when set, makes the metric a histogram's: its series are
	// the rates of the histogram's parts (sources.LabelHistogramPart),
	// added up over a pod's series, a group's members and a
	// LeaderWorkerSet's groups, and the value is the estimate from them.
	// Combine is not used.
	Estimate *group.Estimate
	// OnPools says an endpoint picker supplies the metric: it is served on
	// InferencePool objects too.
	OnPools bool
	// NoneWhenIdle, for an Estimate, leaves the value absent when nothing
	// was observed over the window (no request, so no latency); otherwise
	// it is 0 then. The HPA scales down on no metric while one of its
	// metrics has no value (computeReplicasForMetrics in
	// pkg/controller/podautoscaler/horizontal.go), so an absent latency
	// would hold an idle workload at its replicas.
	NoneWhenIdle bool
}

// estimate is the metric's Estimate of h: 0 when h observed nothing,
// unless NoneWhenIdle.
func (m EndpointMetric) estimate(h group.Histogram) (float64, error) {
	if !m.NoneWhenIdle && h.Idle() {
		return 0, nil
	}
	return m.Estimate.Of(h)
}

// endpointMetrics serves the metrics of pods' endpoints and node exporters
// (--pod-metrics-config) on custom.metrics.k8s.io:
//
//   - Pods, on every pod: its own value, the metric's series in the pod
//     combined by the metric's rule; on a LeaderWorkerSet leader: its
//     group's value instead (group.Combine over the members in the
//     metric's scope, EndpointMetric.Members), so that an HPA on the LWS, whose scale selector
//     matches the leaders only, sees one value per group.
//   - Object, on a LeaderWorkerSet: its groups' values combined by the
//     same rule.
//   - Object, on an InferencePool, for a metric an endpoint picker
//     supplies: the series of the pool's pickers combined by the rule.
//     While a picker is read and has no series of the metric (no request
//     was queued since it started), a sum is 0: that is the demand of a
//     LeaderWorkerSet at zero, which an HPA with minReplicas 0 reads to
//     scale it back. While no picker is read (down, failing, stale) there
//     is no value, and the HPA keeps its replicas rather than scale to
//     zero on missing data. With WithPools, the same on each
//     LeaderWorkerSet a pool fronts, so that an HPA can name the
//     LeaderWorkerSet alone.
//
// How the HPA reads them (k8s.io/kubernetes v1.37.2
// pkg/controller/podautoscaler/replica_calculator.go): for a Pods metric,
// GetMetricReplicas lists the pods of the scale selector and
// calcPlainMetricReplicas averages the values it got over them; a Running
// pod without a value is "missing" (groupPods) and counted as the target
// on a scale-down and as 0 on a scale-up, a Pending one is ignored. A
// group with a missing or Pending member therefore has no value here, so
// that its leader is counted by that rule rather than by a partial sum
// that looks like low load. For an Object metric, GetObjectMetricReplicas
// (Value target) or GetObjectPerPodMetricReplicas (AverageValue, divided by
// the current replicas) has no missing rule: the LWS value is absent while
// any group has none, and the HPA then keeps its replicas.
//
// metricLabelSelector picks series by their own labels (model_name, engine,
// gpu, ...) before they are combined, as prometheus-adapter adds it to the
// series matchers of its query (pkg/custom-provider/series_registry.go,
// QueryForMetric); a pod none of whose series match has no value.
type endpointMetrics struct {
	values  EndpointValues
	metrics map[string]EndpointMetric
	names   []string
	window  int64
	// pools, when set (WithPools), maps a LeaderWorkerSet to the pools
	// that front it.
	pools PoolFronts
}

// PoolFronts says which InferencePools front a LeaderWorkerSet: their
// names, and false while the LeaderWorkerSet is not known.
type PoolFronts interface {
	Fronting(namespace, lws string) (pools []string, known bool)
}

// WithPools returns c serving a metric endpoint pickers supply
// (EndpointMetric.OnPools) on a LeaderWorkerSet too: the values of the
// InferencePools that front it, as pools says. Without it such a metric has
// no value on a LeaderWorkerSet: the pool's demand is not its groups'.
func (c *CustomMetrics) WithPools(pools PoolFronts) *CustomMetrics {
	e := *c.endpoints
	e.pools = pools
	return &CustomMetrics{p: c.p, endpoints: &e}
}

// WithEndpoints returns c serving also the pod-endpoint metrics from
// values. window is the collection interval, reported as each value's
// window.
func (c *CustomMetrics) WithEndpoints(values EndpointValues, metrics []EndpointMetric, window time.Duration) *CustomMetrics {
	e := &endpointMetrics{values: values, metrics: map[string]EndpointMetric{}, window: int64(window.Seconds())}
	for _, m := range metrics {
		e.metrics[m.Name] = m
		e.names = append(e.names, m.Name)
	}
	sort.Strings(e.names)
	return &CustomMetrics{p: c.p, endpoints: e}
}

func (e *endpointMetrics) serves(name string) bool {
	if e == nil {
		return false
	}
	_, ok := e.metrics[name]
	return ok
}

// infos lists the metrics on pods, and on LeaderWorkerSets when groups
// exist.
func (e *endpointMetrics) infos(groups bool) []cmprovider.CustomMetricInfo {
	if e == nil {
		return nil
	}
	out := make([]cmprovider.CustomMetricInfo, 0, 2*len(e.names))
	for _, n := range e.names {
		out = append(out, cmprovider.CustomMetricInfo{GroupResource: podsResource, Namespaced: true, Metric: n})
	}
	if groups {
		for _, n := range e.names {
			out = append(out, cmprovider.CustomMetricInfo{GroupResource: LWSResource, Namespaced: true, Metric: n})
		}
	}
	for _, n := range e.names {
		if e.metrics[n].OnPools {
			out = append(out, cmprovider.CustomMetricInfo{GroupResource: InferencePoolResource, Namespaced: true, Metric: n})
		}
	}
	return out
}

// endpointByName answers GetMetricByName for a pod-endpoint metric.
func (c *CustomMetrics) endpointByName(name types.NamespacedName, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValue, error) {
	m := c.endpoints.metrics[info.Metric]
	if !info.Namespaced || name.Namespace == "" {
		return nil, notFoundWhy(info, name.Name, "pod endpoint metrics are namespaced: ask in the namespace of the "+info.GroupResource.String())
	}
	switch info.GroupResource {
	case podsResource:
		pod, ok := c.p.pods.Pod(name.Namespace, name.Name)
		if !ok {
			return nil, cmprovider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
		}
		return c.endpointPodValue(pod, m, info, sel)
	case LWSResource:
		if m.OnPools {
			return c.endpointLWSPoolsValue(name, m, info, sel)
		}
		return c.endpointLWSValue(name, m, info, sel)
	case InferencePoolResource:
		if m.OnPools {
			return c.endpointPoolValue(name, m, info, sel)
		}
	}
	return nil, cmprovider.NewMetricNotFoundError(info.GroupResource, info.Metric)
}

// endpointLWSPoolsValue is a LeaderWorkerSet's value of a metric endpoint
// pickers supply: that of the one InferencePool that fronts it, or the
// pools' values combined by the metric's rule when several do (a
// histogram's estimates do not combine: none then). None while no pool
// fronts it or one has no value.
func (c *CustomMetrics) endpointLWSPoolsValue(name types.NamespacedName, m EndpointMetric, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValue, error) {
	if c.endpoints.pools == nil {
		return nil, notFoundWhy(info, name.Name, "an endpoint picker's metric is served on the InferencePool; the server does not map pools to LeaderWorkerSets here")
	}
	pools, known := c.endpoints.pools.Fronting(name.Namespace, name.Name)
	switch {
	case !known:
		return nil, notFoundWhy(info, name.Name, "this LeaderWorkerSet is not known (yet)")
	case len(pools) == 0:
		return nil, notFoundWhy(info, name.Name, "no InferencePool selects this LeaderWorkerSet's pods")
	case len(pools) > 1 && m.Estimate != nil:
		return nil, notFoundWhy(info, name.Name, fmt.Sprintf("InferencePools %v select its pods, and their estimates do not combine", pools))
	}
	values := make([]group.Value, 0, len(pools))
	var oldest time.Time
	for _, pool := range pools {
		v, err := c.endpointPoolValue(types.NamespacedName{Namespace: name.Namespace, Name: pool}, m, info, sel)
		if err != nil {
			return nil, notFoundWhy(info, name.Name, fmt.Sprintf("InferencePool %s has no value: %v", pool, err))
		}
		values = append(values, group.Value{Name: pool, Value: float64(v.Value.MilliValue()) / 1000})
		if oldest.IsZero() || v.Timestamp.Time.Before(oldest) {
			oldest = v.Timestamp.Time
		}
	}
	v, err := m.Combine.Of(values)
	if len(values) == 1 {
		v, err = values[0].Value, nil
	}
	if err != nil {
		return nil, notFoundWhy(info, name.Name, err.Error())
	}
	ref := custom_metrics.ObjectReference{Kind: "LeaderWorkerSet", APIVersion: "leaderworkerset.x-k8s.io/v1", Namespace: name.Namespace, Name: name.Name}
	return c.endpoints.metricValue(ref, info, v, oldest), nil
}

// endpointPoolValue is an InferencePool's value of a metric its endpoint
// pickers supply: their series combined by the metric's rule (a
// histogram's, the estimate from them), the rule over nothing while a
// picker is read and has none, and none while no picker is read.
func (c *CustomMetrics) endpointPoolValue(name types.NamespacedName, m EndpointMetric, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValue, error) {
	key := sources.ObjectKey(sources.InferencePools, name.Name)
	if !c.endpoints.values.Credited(name.Namespace, key) {
		return nil, notFoundWhy(info, name.Name, "no endpoint picker of this InferencePool has been read (not scraped yet, failing, or stale)")
	}
	v, ts, ok := c.objectValue(name.Namespace, key, "", m, sel)
	if !ok {
		var err error
		if m.Estimate != nil {
			v, err = m.estimate(group.Histogram{})
		} else {
			v, err = m.Combine.Of(nil)
		}
		if err != nil {
			return nil, notFoundWhy(info, name.Name, "the endpoint picker has no series of this metric: "+err.Error())
		}
		ts = c.p.clock.Now()
	}
	ref := custom_metrics.ObjectReference{Kind: "InferencePool", APIVersion: "inference.networking.k8s.io/v1", Namespace: name.Namespace, Name: name.Name}
	return c.endpoints.metricValue(ref, info, v, ts), nil
}

// endpointBySelector answers GetMetricBySelector for pods: every selected
// pod that has a value (its own, or its group's for a leader).
func (c *CustomMetrics) endpointBySelector(namespace string, selector labels.Selector, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValueList, error) {
	m := c.endpoints.metrics[info.Metric]
	out := &custom_metrics.MetricValueList{}
	for _, pod := range c.p.pods.List(namespace, selector) {
		if v, err := c.endpointPodValue(pod, m, info, sel); err == nil {
			out.Items = append(out.Items, *v)
		}
	}
	return out, nil
}

// endpointPodValue is a pod's value: its group's for a leader, its own
// otherwise.
func (c *CustomMetrics) endpointPodValue(pod *podcache.Pod, m EndpointMetric, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValue, error) {
	ref := custom_metrics.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name}
	if c.p.groups && c.p.pods.Leads(pod) {
		key, _ := pod.GroupKey()
		v, ts, err := c.groupValue(c.p.pods.Group(key), m, sel)
		if err != nil {
			return nil, notFoundWhy(info, pod.Name, "the leader's group has no value: "+err.Error())
		}
		return c.endpoints.metricValue(ref, info, v, ts), nil
	}
	v, ts, ok := c.ownValue(pod, m, sel)
	if !ok {
		return nil, notFoundWhy(info, pod.Name, "no value from the pod's endpoint or a node exporter (not scraped yet, failing, or no matching series)")
	}
	return c.endpoints.metricValue(ref, info, v, ts), nil
}

// ownValue combines, by the metric's rule, the pod's series that sel
// matches (every series when sel is nil); false when none does. The
// timestamp is the newest series'. A histogram's value is the estimate
// from its parts.
func (c *CustomMetrics) ownValue(pod *podcache.Pod, m EndpointMetric, sel labels.Selector) (float64, time.Time, bool) {
	return c.objectValue(pod.Namespace, pod.Name, pod.UIDString(), m, sel)
}

// objectValue is ownValue of the pod or object (sources.ObjectKey)
// namespace/name whose UID is uid ("" for any).
func (c *CustomMetrics) objectValue(namespace, name, uid string, m EndpointMetric, sel labels.Selector) (float64, time.Time, bool) {
	if m.Estimate != nil {
		h, ts, ok := c.objectHistogram(namespace, name, uid, m, sel)
		if !ok {
			return 0, time.Time{}, false
		}
		v, err := m.estimate(h)
		return v, ts, err == nil
	}
	var (
		series []group.Value
		newest time.Time
	)
	for _, v := range c.endpoints.values.Series(namespace, name, uid, m.Name) {
		if sel != nil && !sel.Matches(labels.Set(v.Labels())) {
			continue
		}
		series = append(series, group.Value{State: group.Counted, Value: v.Value})
		if v.Timestamp.After(newest) {
			newest = v.Timestamp
		}
	}
	if len(series) == 0 {
		return 0, time.Time{}, false
	}
	x, err := m.Combine.Of(series)
	return x, newest, err == nil
}

// ownHistogram gathers the rates of the parts of the pod's histograms whose
// series sel matches; false when there are none. The timestamp is the
// newest part's.
func (c *CustomMetrics) ownHistogram(pod *podcache.Pod, m EndpointMetric, sel labels.Selector) (group.Histogram, time.Time, bool) {
	return c.objectHistogram(pod.Namespace, pod.Name, pod.UIDString(), m, sel)
}

// objectHistogram is ownHistogram of the pod or object namespace/name.
func (c *CustomMetrics) objectHistogram(namespace, name, uid string, m EndpointMetric, sel labels.Selector) (group.Histogram, time.Time, bool) {
	var (
		h      group.Histogram
		newest time.Time
	)
	for _, v := range c.endpoints.values.Series(namespace, name, uid, m.Name) {
		l := v.Labels()
		if sel != nil && !sel.Matches(labels.Set(l)) {
			continue
		}
		switch l[sources.LabelHistogramPart] {
		case sources.PartBucket:
			le, err := strconv.ParseFloat(l[sources.LabelLE], 64)
			if err != nil {
				continue // not a bound the source wrote
			}
			h.Buckets = append(h.Buckets, group.Bucket{UpperBound: le, Count: v.Value})
		case sources.PartSum:
			h.SumRate += v.Value
		case sources.PartCount:
			h.CountRate += v.Value
		default:
			continue
		}
		h.HasParts = true
		if v.Timestamp.After(newest) {
			newest = v.Timestamp
		}
	}
	return h, newest, h.HasParts
}

// groupHistogram pools the histogram parts of the members of a group in the
// metric's scope, each member classified as groupValue classifies it; the
// timestamp is the oldest member's.
func (c *CustomMetrics) groupHistogram(pods []*podcache.Pod, m EndpointMetric, sel labels.Selector) (group.Histogram, time.Time, error) {
	var (
		pooled  group.Histogram
		members []group.Value
		oldest  time.Time
	)
	for _, mp := range pods {
		if !m.Members.Includes(mp.Leader()) {
			continue
		}
		h, ts, has := c.ownHistogram(mp, m, sel)
		members = append(members, group.Value{Name: mp.Name, State: group.Classify(mp.Phase(), mp.Deleting(), has)})
		pooled.Add(h)
		if has && (oldest.IsZero() || ts.Before(oldest)) {
			oldest = ts
		}
	}
	return pooled, oldest, group.AllCounted(members)
}

// groupValue combines the members of a group in the metric's scope by the
// metric's rule (group.Combine), each classified as the HPA's groupPods
// counts a pod for a metric that is not CPU; the timestamp is the oldest
// member's. A histogram's is the estimate from its members' pooled parts.
func (c *CustomMetrics) groupValue(pods []*podcache.Pod, m EndpointMetric, sel labels.Selector) (float64, time.Time, error) {
	if m.Estimate != nil {
		h, ts, err := c.groupHistogram(pods, m, sel)
		if err != nil {
			return 0, ts, err
		}
		v, err := m.estimate(h)
		return v, ts, err
	}
	members := make([]group.Value, 0, len(pods))
	var oldest time.Time
	for _, mp := range pods {
		if !m.Members.Includes(mp.Leader()) {
			continue
		}
		v, ts, has := c.ownValue(mp, m, sel)
		members = append(members, group.Value{Name: mp.Name, State: group.Classify(mp.Phase(), mp.Deleting(), has), Value: v})
		if has && (oldest.IsZero() || ts.Before(oldest)) {
			oldest = ts
		}
	}
	v, err := m.Combine.Of(members)
	if err == nil && oldest.IsZero() {
		oldest = c.p.clock.Now() // no member in scope: the sum of nothing, now
	}
	return v, oldest, err
}

// endpointLWSValue combines the values of every group of a LeaderWorkerSet
// by the metric's rule; absent while any group has none. A LeaderWorkerSet
// the pod cache knows with no group (scaled to zero) has the value of the
// rule over nothing: 0 for a sum, none for the others.
func (c *CustomMetrics) endpointLWSValue(name types.NamespacedName, m EndpointMetric, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValue, error) {
	leaders := c.p.pods.List(name.Namespace, labels.SelectorFromSet(labels.Set{group.LabelName: name.Name, group.LabelWorkerIndex: "0"}))
	groups := make([]group.Value, 0, len(leaders))
	var (
		oldest time.Time
		pooled group.Histogram // a histogram's groups' parts
	)
	for _, l := range leaders {
		key, ok := l.GroupKey()
		if !ok || !c.p.pods.Leads(l) {
			continue
		}
		var (
			v   float64
			ts  time.Time
			err error
		)
		if m.Estimate != nil {
			var h group.Histogram
			h, ts, err = c.groupHistogram(c.p.pods.Group(key), m, sel)
			pooled.Add(h)
		} else {
			v, ts, err = c.groupValue(c.p.pods.Group(key), m, sel)
		}
		if err != nil {
			return nil, notFoundWhy(info, name.Name, fmt.Sprintf("group of leader %s has no value: %v", l.Name, err))
		}
		groups = append(groups, group.Value{Name: l.Name, Value: v})
		if oldest.IsZero() || ts.Before(oldest) {
			oldest = ts
		}
	}
	if len(groups) == 0 {
		if !c.p.pods.LeaderWorkerSet(name.Namespace, name.Name) {
			return nil, notFoundWhy(info, name.Name, "no leader pod of this LeaderWorkerSet is known")
		}
		oldest = c.p.clock.Now()
	}
	var (
		v   float64
		err error
	)
	if m.Estimate != nil {
		v, err = m.estimate(pooled)
	} else {
		v, err = m.Combine.Of(groups)
	}
	if err != nil {
		return nil, notFoundWhy(info, name.Name, err.Error())
	}
	ref := custom_metrics.ObjectReference{Kind: "LeaderWorkerSet", APIVersion: "leaderworkerset.x-k8s.io/v1", Namespace: name.Namespace, Name: name.Name}
	return c.endpoints.metricValue(ref, info, v, oldest), nil
}

// metricValue shapes a value, in milli-units (the HPA reads MilliValue).
func (e *endpointMetrics) metricValue(ref custom_metrics.ObjectReference, info cmprovider.CustomMetricInfo, v float64, ts time.Time) *custom_metrics.MetricValue {
	window := e.window
	return &custom_metrics.MetricValue{
		DescribedObject: ref,
		Metric:          custom_metrics.MetricIdentifier{Name: info.Metric},
		Timestamp:       metav1.NewTime(ts),
		WindowSeconds:   &window,
		Value:           *resource.NewMilliQuantity(milli(v), resource.DecimalSI),
	}
}
