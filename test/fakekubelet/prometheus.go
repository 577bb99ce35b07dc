package fakekubelet

import (
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// ResourceMetricsContentType is the Content-Type of GET /metrics/resource.
const ResourceMetricsContentType = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"

type family struct {
	name, help string
	kind       dto.MetricType
	labels     []string // sorted by name, as the exposition writes them
}

var (
	containerCPUFamily = family{"container_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the container in core-seconds", dto.MetricType_COUNTER, []string{"container", "namespace", "pod"}}
	containerMemFamily = family{"container_memory_working_set_bytes", "[STABLE] Current working set of the container in bytes", dto.MetricType_GAUGE, []string{"container", "namespace", "pod"}}
	containerStart     = family{"container_start_time_seconds", "[STABLE] Start time of the container since unix epoch in seconds", dto.MetricType_GAUGE, []string{"container", "namespace", "pod"}}
	nodeCPUFamily      = family{"node_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the node in core-seconds", dto.MetricType_COUNTER, nil}
	nodeMemFamily      = family{"node_memory_working_set_bytes", "[STABLE] Current working set of the node in bytes", dto.MetricType_GAUGE, nil}
	podCPUFamily       = family{"pod_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the pod in core-seconds", dto.MetricType_COUNTER, []string{"namespace", "pod"}}
	podMemFamily       = family{"pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes", dto.MetricType_GAUGE, []string{"namespace", "pod"}}
	scrapeErrorFamily  = family{"resource_scrape_error", "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", dto.MetricType_GAUGE, nil}
)

// WriteResourceMetrics writes s in the Prometheus text format the kubelet's
// /metrics/resource endpoint uses, with the encoder the kubelet's registry
// uses (expfmt): families sorted by name, samples sorted by label values,
// counters in seconds, timestamps in milliseconds, and container start
// times without a timestamp.
func WriteResourceMetrics(w io.Writer, s *stats.Summary) error {
	byName := map[string]*dto.MetricFamily{}
	add := func(f family, v float64, ts *time.Time, values ...string) {
		mf := byName[f.name]
		if mf == nil {
			mf = &dto.MetricFamily{Name: &f.name, Help: &f.help, Type: f.kind.Enum()}
			byName[f.name] = mf
		}
		m := &dto.Metric{}
		for i := range f.labels {
			m.Label = append(m.Label, &dto.LabelPair{Name: &f.labels[i], Value: &values[i]})
		}
		if f.kind == dto.MetricType_COUNTER {
			m.Counter = &dto.Counter{Value: &v}
		} else {
			m.Gauge = &dto.Gauge{Value: &v}
		}
		if ts != nil {
			ms := ts.UnixMilli()
			m.TimestampMs = &ms
		}
		mf.Metric = append(mf.Metric, m)
	}
	// usage adds a cgroup's CPU counter, in seconds, and working set.
	usage := func(cpuFamily, memFamily family, c *stats.CPUStats, m *stats.MemoryStats, values ...string) {
		if c != nil && c.UsageCoreNanoSeconds != nil {
			add(cpuFamily, float64(*c.UsageCoreNanoSeconds)/float64(time.Second), &c.Time.Time, values...)
		}
		if m != nil && m.WorkingSetBytes != nil {
			add(memFamily, float64(*m.WorkingSetBytes), &m.Time.Time, values...)
		}
	}
	usage(nodeCPUFamily, nodeMemFamily, s.Node.CPU, s.Node.Memory)
	for _, p := range s.Pods {
		ns, name := p.PodRef.Namespace, p.PodRef.Name
		for _, c := range p.Containers {
			if c.StartTime.Unix() > 0 {
				add(containerStart, float64(c.StartTime.UnixNano())/float64(time.Second), nil, c.Name, ns, name)
			}
			usage(containerCPUFamily, containerMemFamily, c.CPU, c.Memory, c.Name, ns, name)
		}
		usage(podCPUFamily, podMemFamily, p.CPU, p.Memory, ns, name)
	}
	add(scrapeErrorFamily, 0, nil)

	for _, name := range slices.Sorted(maps.Keys(byName)) {
		mf := byName[name]
		slices.SortStableFunc(mf.Metric, func(a, b *dto.Metric) int {
			return slices.CompareFunc(a.Label, b.Label, func(x, y *dto.LabelPair) int { return strings.Compare(x.GetValue(), y.GetValue()) })
		})
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return err
		}
	}
	return nil
}
