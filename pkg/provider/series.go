package provider

import (
	"sort"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/metrics"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
)

// GroupSample is one LeaderWorkerSet group's usage, as the group metrics
// on custom.metrics.k8s.io report it: the members' summed usage and
// Σusage / Σrequest, present only while every member counts as the HPA
// counts pods (group.State), as on custom.metrics.k8s.io.
type GroupSample struct {
	Namespace, LeaderWorkerSet, Group string
	// CPUCores and MemoryBytes are the members' summed usage, valid only
	// when HasUsage.
	CPUCores, MemoryBytes float64
	HasUsage              bool
	// CPUUtilization and MemoryUtilization are ratios (0.7 = 70%), valid
	// only when the matching Has... is true.
	CPUUtilization, MemoryUtilization       float64
	HasCPUUtilization, HasMemoryUtilization bool
	// Members are the group's pods known to the server, Counted those
	// the HPA would count at face value.
	Members, Counted int
}

// GroupSamples returns a sample for every LeaderWorkerSet group whose
// leader pod is known, sorted by namespace, LeaderWorkerSet and group, one
// per group: two leaders of one group (the pod cache in the middle of a
// replacement, or a pod posing as one) give the first leader's sample
// only, so the series stay unique. It is nil without a group index.
func (p *Provider) GroupSamples() []GroupSample {
	if !p.groups {
		return nil
	}
	sel := labels.SelectorFromSet(labels.Set{group.LabelWorkerIndex: "0"})
	leaders := p.pods.List("", sel)
	out := make([]GroupSample, 0, len(leaders))
	seen := make(map[string]bool, len(leaders))
	for _, leader := range leaders {
		key, ok := leader.GroupKey()
		if !ok || seen[key] || !p.pods.Leads(leader) {
			continue
		}
		seen[key] = true
		pods := p.pods.Group(key)
		g := p.groupUsage(pods)
		gs := GroupSample{
			Namespace: leader.Namespace, LeaderWorkerSet: leader.Labels[group.LabelName], Group: leader.Labels[group.LabelGroupIndex],
			Members: len(pods),
		}
		for _, v := range g.values[group.CPU] {
			if v.State == group.Counted {
				gs.Counted++
			}
		}
		cpu, errCPU := group.CombineSum.Of(g.values[group.CPU])
		mem, errMem := group.CombineSum.Of(g.values[group.Memory])
		if errCPU == nil && errMem == nil {
			gs.CPUCores, gs.MemoryBytes, gs.HasUsage = cpu/1e9, mem, true
		}
		gs.CPUUtilization, errCPU = group.CombineRatio.Of(g.values[group.CPU])
		gs.MemoryUtilization, errMem = group.CombineRatio.Of(g.values[group.Memory])
		gs.HasCPUUtilization, gs.HasMemoryUtilization = errCPU == nil, errMem == nil
		out = append(out, gs)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.LeaderWorkerSet != b.LeaderWorkerSet {
			return a.LeaderWorkerSet < b.LeaderWorkerSet
		}
		return a.Group < b.Group
	})
	return out
}

// groupLabels are the labels of every group series: at most one series of
// each name per LeaderWorkerSet group, so the cardinality is bounded by the
// number of groups.
var groupLabels = []string{"namespace", "leaderworkerset", "group"}

func groupDesc(name, help string) *metrics.Desc {
	return metrics.NewDesc("group_metrics_server_lws_group_"+name, help, groupLabels, nil, metrics.ALPHA, "")
}

var (
	descCPU          = groupDesc("cpu_usage_cores", "CPU usage of a LeaderWorkerSet group's members, in cores; absent while a member has no metrics.")
	descMemory       = groupDesc("memory_usage_bytes", "Working-set memory of a LeaderWorkerSet group's members, in bytes; absent while a member has no metrics.")
	descCPUUtil      = groupDesc("cpu_utilization", "CPU usage over CPU requests of a LeaderWorkerSet group's members that request CPU (0.7 = 70%); absent while a member has no metrics.")
	descMemoryUtil   = groupDesc("memory_utilization", "Memory usage over memory requests of a LeaderWorkerSet group's members that request memory (0.7 = 70%); absent while a member has no metrics.")
	descMembers      = groupDesc("members", "Pods of a LeaderWorkerSet group known to the server.")
	descMembersCount = groupDesc("members_counted", "Pods of a LeaderWorkerSet group that count at face value as the HPA counts pods.")
)

// GroupSeriesCollector exposes GroupSamples as Prometheus series (opt-in:
// --group-metrics-series), for Prometheus, KEDA's Prometheus scaler or
// prometheus-adapter to read without custom.metrics.k8s.io.
type GroupSeriesCollector struct {
	metrics.BaseStableCollector
	samples func() []GroupSample
}

var _ metrics.StableCollector = &GroupSeriesCollector{}

// NewGroupSeriesCollector returns a collector of the samples that samples
// returns at each scrape (a Provider's GroupSamples); register it with
// legacyregistry.CustomMustRegister.
func NewGroupSeriesCollector(samples func() []GroupSample) *GroupSeriesCollector {
	return &GroupSeriesCollector{samples: samples}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *GroupSeriesCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, d := range []*metrics.Desc{descCPU, descMemory, descCPUUtil, descMemoryUtil, descMembers, descMembersCount} {
		ch <- d
	}
}

// CollectWithStability implements metrics.StableCollector.
func (c *GroupSeriesCollector) CollectWithStability(ch chan<- metrics.Metric) {
	for _, s := range c.samples() {
		lv := []string{s.Namespace, s.LeaderWorkerSet, s.Group}
		gauge := func(d *metrics.Desc, v float64) {
			ch <- metrics.NewLazyConstMetric(d, metrics.GaugeValue, v, lv...)
		}
		gauge(descMembers, float64(s.Members))
		gauge(descMembersCount, float64(s.Counted))
		if s.HasUsage {
			gauge(descCPU, s.CPUCores)
			gauge(descMemory, s.MemoryBytes)
		}
		if s.HasCPUUtilization {
			gauge(descCPUUtil, s.CPUUtilization)
		}
		if s.HasMemoryUtilization {
			gauge(descMemoryUtil, s.MemoryUtilization)
		}
	}
}
