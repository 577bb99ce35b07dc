package fakekubelet

import (
	"bytes"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// ResourceMetricsContentType is the Content-Type of GET /metrics/resource.
const ResourceMetricsContentType = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"

type family struct {
	name, help, kind string
	labels           []string // sorted by name, as the exposition writes them
}

var (
	containerCPUFamily = family{"container_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the container in core-seconds", "counter", []string{"container", "namespace", "pod"}}
	containerMemFamily = family{"container_memory_working_set_bytes", "[STABLE] Current working set of the container in bytes", "gauge", []string{"container", "namespace", "pod"}}
	containerStart     = family{"container_start_time_seconds", "[STABLE] Start time of the container since unix epoch in seconds", "gauge", []string{"container", "namespace", "pod"}}
	nodeCPUFamily      = family{"node_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the node in core-seconds", "counter", nil}
	nodeMemFamily      = family{"node_memory_working_set_bytes", "[STABLE] Current working set of the node in bytes", "gauge", nil}
	podCPUFamily       = family{"pod_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the pod in core-seconds", "counter", []string{"namespace", "pod"}}
	podMemFamily       = family{"pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes", "gauge", []string{"namespace", "pod"}}
	scrapeErrorFamily  = family{"resource_scrape_error", "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", "gauge", nil}
)

type promSample struct {
	labels []string // values, in family.labels order
	value  float64
	ts     *time.Time
}

// WriteResourceMetrics writes s in the Prometheus text format the kubelet's
// /metrics/resource endpoint uses: families sorted by name, samples sorted by
// label values, counters in seconds, timestamps in milliseconds, and
// container start times without a timestamp.
func WriteResourceMetrics(w io.Writer, s *stats.Summary) error {
	bySeries := map[string][]promSample{}
	add := func(f family, v float64, ts *time.Time, labels ...string) {
		bySeries[f.name] = append(bySeries[f.name], promSample{labels: labels, value: v, ts: ts})
	}
	if c := s.Node.CPU; c != nil && c.UsageCoreNanoSeconds != nil {
		add(nodeCPUFamily, seconds(*c.UsageCoreNanoSeconds), &c.Time.Time)
	}
	if m := s.Node.Memory; m != nil && m.WorkingSetBytes != nil {
		add(nodeMemFamily, float64(*m.WorkingSetBytes), &m.Time.Time)
	}
	for _, p := range s.Pods {
		ns, name := p.PodRef.Namespace, p.PodRef.Name
		for _, c := range p.Containers {
			if c.StartTime.Unix() > 0 {
				add(containerStart, float64(c.StartTime.UnixNano())/float64(time.Second), nil, c.Name, ns, name)
			}
			if c.CPU != nil && c.CPU.UsageCoreNanoSeconds != nil {
				add(containerCPUFamily, seconds(*c.CPU.UsageCoreNanoSeconds), &c.CPU.Time.Time, c.Name, ns, name)
			}
			if c.Memory != nil && c.Memory.WorkingSetBytes != nil {
				add(containerMemFamily, float64(*c.Memory.WorkingSetBytes), &c.Memory.Time.Time, c.Name, ns, name)
			}
		}
		if p.CPU != nil && p.CPU.UsageCoreNanoSeconds != nil {
			add(podCPUFamily, seconds(*p.CPU.UsageCoreNanoSeconds), &p.CPU.Time.Time, ns, name)
		}
		if p.Memory != nil && p.Memory.WorkingSetBytes != nil {
			add(podMemFamily, float64(*p.Memory.WorkingSetBytes), &p.Memory.Time.Time, ns, name)
		}
	}
	add(scrapeErrorFamily, 0, nil)

	var out bytes.Buffer
	for _, f := range []family{containerCPUFamily, containerMemFamily, containerStart, nodeCPUFamily, nodeMemFamily, podCPUFamily, podMemFamily, scrapeErrorFamily} {
		samples := bySeries[f.name]
		if len(samples) == 0 {
			continue
		}
		sort.SliceStable(samples, func(i, j int) bool {
			a, b := samples[i].labels, samples[j].labels
			for k := range a {
				if a[k] != b[k] {
					return a[k] < b[k]
				}
			}
			return false
		})
		writeFamily(&out, f, samples)
	}
	_, err := w.Write(out.Bytes())
	return err
}

func writeFamily(w *bytes.Buffer, f family, samples []promSample) {
	w.WriteString("# HELP " + f.name + " " + escapeHelp(f.help) + "\n")
	w.WriteString("# TYPE " + f.name + " " + f.kind + "\n")
	var buf []byte
	for _, s := range samples {
		buf = append(buf[:0], f.name...)
		if len(f.labels) > 0 {
			buf = append(buf, '{')
			for i, l := range f.labels {
				if i > 0 {
					buf = append(buf, ',')
				}
				buf = append(buf, l...)
				buf = append(buf, '=', '"')
				buf = append(buf, escapeLabel(s.labels[i])...)
				buf = append(buf, '"')
			}
			buf = append(buf, '}')
		}
		buf = append(buf, ' ')
		buf = appendFloat(buf, s.value)
		if s.ts != nil {
			buf = append(buf, ' ')
			buf = strconv.AppendInt(buf, s.ts.UnixMilli(), 10)
		}
		buf = append(buf, '\n')
		w.Write(buf)
	}
}

func seconds(coreNanoSeconds uint64) float64 { return float64(coreNanoSeconds) / float64(time.Second) }

func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
