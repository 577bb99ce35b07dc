package provider

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/metrics"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// EndpointGroupSample is one LeaderWorkerSet group's value of one
// pod-endpoint metric, as its leader serves it on custom.metrics.k8s.io.
type EndpointGroupSample struct {
	Namespace, LeaderWorkerSet, Group, Metric string
	Value                                     float64
}

// EndpointGroupSamples returns the value of every pod-endpoint metric of
// every group that has one (a group with a missing member has none), by
// leader in the pod cache's order and metric name. Nil without
// WithEndpoints or a group index.
func (c *CustomMetrics) EndpointGroupSamples() []EndpointGroupSample {
	if c.endpoints == nil || !c.p.groups {
		return nil
	}
	var out []EndpointGroupSample
	for _, leader := range c.p.pods.List("", labels.SelectorFromSet(labels.Set{group.LabelWorkerIndex: "0"})) {
		key, ok := leader.GroupKey()
		if !ok || !c.p.pods.Leads(leader) {
			continue
		}
		members := c.p.pods.Group(key)
		for _, name := range c.endpoints.names {
			v, _, err := c.groupValue(members, c.endpoints.metrics[name], nil)
			if err != nil {
				continue
			}
			out = append(out, EndpointGroupSample{
				Namespace: leader.Namespace, LeaderWorkerSet: leader.Labels[group.LabelName],
				Group: leader.Labels[group.LabelGroupIndex], Metric: name, Value: v,
			})
		}
	}
	return out
}

var descEndpointValue = metrics.NewDesc("group_metrics_server_lws_group_endpoint_value",
	"A LeaderWorkerSet group's value of a metric read from pod endpoints or node exporters (--pod-metrics-config), by served metric name; absent while a member has none.",
	append(append([]string(nil), groupLabels...), "metric"), nil, metrics.ALPHA, "")

// EndpointGroupSeriesCollector exposes EndpointGroupSamples on /metrics
// (with --group-metrics-series): one series per group and configured
// metric.
type EndpointGroupSeriesCollector struct {
	metrics.BaseStableCollector
	samples func() []EndpointGroupSample
}

var _ metrics.StableCollector = &EndpointGroupSeriesCollector{}

// NewEndpointGroupSeriesCollector returns a collector of what samples
// returns at each scrape.
func NewEndpointGroupSeriesCollector(samples func() []EndpointGroupSample) *EndpointGroupSeriesCollector {
	return &EndpointGroupSeriesCollector{samples: samples}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *EndpointGroupSeriesCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- descEndpointValue
}

// CollectWithStability implements metrics.StableCollector.
func (c *EndpointGroupSeriesCollector) CollectWithStability(ch chan<- metrics.Metric) {
	for _, s := range c.samples() {
		ch <- metrics.NewLazyConstMetric(descEndpointValue, metrics.GaugeValue, s.Value, s.Namespace, s.LeaderWorkerSet, s.Group, s.Metric)
	}
}
