package fakekubelet

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestResourceMetricsText(t *testing.T) {
	_, n := fixture(t)
	got := string(mustGet(t, newClient(t, n.fleet), n, "/metrics/resource"))
	want := `# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web-0"} 2.5 1767323055000
container_cpu_usage_seconds_total{container="sidecar",namespace="default",pod="web-0"} 2.5 1767323055000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="default",pod="web-0"} 1.048576e+08 1767323055000
container_memory_working_set_bytes{container="sidecar",namespace="default",pod="web-0"} 1.048576e+08 1767323055000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="app",namespace="default",pod="web-0"} 1.767323045e+09
container_start_time_seconds{container="sidecar",namespace="default",pod="web-0"} 1.767323045e+09
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 6 1767323055000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 7.46586112e+08 1767323055000
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="web-0"} 5 1767323055000
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="default",pod="web-0"} 2.097152e+08 1767323055000
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("/metrics/resource (-want +got):\n%s", diff)
	}
}

func TestWriteResourceMetricsOrderAndEscaping(t *testing.T) {
	ts := metav1.NewTime(t0)
	cs := func(name string, ns uint64) stats.ContainerStats {
		return stats.ContainerStats{Name: name, StartTime: ts, CPU: &stats.CPUStats{Time: ts, UsageCoreNanoSeconds: ptr.To(ns)}}
	}
	s := &stats.Summary{Pods: []stats.PodStats{
		{PodRef: stats.PodReference{Name: "b", Namespace: "z"}, Containers: []stats.ContainerStats{cs("c", 1)}},
		{PodRef: stats.PodReference{Name: `we"ird\`, Namespace: "a"}, Containers: []stats.ContainerStats{cs("c", 1500000000), cs("a\nb", 0)}},
	}}
	var buf bytes.Buffer
	must(t, WriteResourceMetrics(&buf, s))
	var got []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(l, "container_cpu_usage_seconds_total") {
			got = append(got, l)
		}
	}
	want := []string{
		`container_cpu_usage_seconds_total{container="a\nb",namespace="a",pod="we\"ird\\"} 0 1767323045000`,
		`container_cpu_usage_seconds_total{container="c",namespace="a",pod="we\"ird\\"} 1.5 1767323045000`,
		`container_cpu_usage_seconds_total{container="c",namespace="z",pod="b"} 1e-09 1767323045000`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if strings.Contains(buf.String(), "node_") || strings.Contains(buf.String(), "pod_cpu") {
		t.Errorf("families without samples were written:\n%s", buf.String())
	}
}

// parseText reads the sample lines of a Prometheus text body into
// "name{labels}" -> "value timestamp".
func parseText(body string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndex(l, "} ") + 1
		if i == 0 {
			i = strings.Index(l, " ")
		}
		out[l[:i]] = l[i+1:]
	}
	return out
}

// seriesFromSummary derives what /metrics/resource must say from a summary.
func seriesFromSummary(s *stats.Summary) map[string]string {
	out := map[string]string{"resource_scrape_error": "0"}
	float := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	// cgroup adds the CPU counter, in seconds, and the working set of one cgroup.
	cgroup := func(level, labels string, cpu *stats.CPUStats, mem *stats.MemoryStats) {
		out[level+"_cpu_usage_seconds_total"+labels] = float(float64(*cpu.UsageCoreNanoSeconds)/1e9) + " " + strconv.FormatInt(cpu.Time.UnixMilli(), 10)
		out[level+"_memory_working_set_bytes"+labels] = float(float64(*mem.WorkingSetBytes)) + " " + strconv.FormatInt(mem.Time.UnixMilli(), 10)
	}
	cgroup("node", "", s.Node.CPU, s.Node.Memory)
	for _, p := range s.Pods {
		pl := fmt.Sprintf(`namespace="%s",pod="%s"`, p.PodRef.Namespace, p.PodRef.Name)
		cgroup("pod", "{"+pl+"}", p.CPU, p.Memory)
		for _, c := range p.Containers {
			cl := fmt.Sprintf(`{container="%s",%s}`, c.Name, pl)
			cgroup("container", cl, c.CPU, c.Memory)
			out["container_start_time_seconds"+cl] = float(float64(c.StartTime.Unix()))
		}
	}
	return out
}

func TestSummaryAndResourceMetricsAgree(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *Fleet)
		step  time.Duration
	}{
		{name: "defaults", step: 7 * time.Second},
		{name: "pod usage", setup: func(f *Fleet) {
			f.SetUsage(UsageTarget{Namespace: "ns1", Name: "p1"}, Usage{CPUNanoCores: 1234567, MemoryBytes: 98765432})
		}, step: 1500 * time.Millisecond},
		{name: "container usage", setup: func(f *Fleet) {
			f.SetUsage(UsageTarget{Namespace: "ns2", Name: "p2", Container: "b"}, Usage{CPUNanoCores: 3e9, MemoryBytes: 1 << 30})
		}, step: 61 * time.Second},
		{name: "counter reset", setup: func(f *Fleet) {
			n, _ := f.Node("n1")
			n.ResetCounters()
		}, step: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, fc := newTestFleet(t, Config{})
			n := addNode(t, f, "n1")
			setPod(t, f, "n1", Pod{Namespace: "ns1", Name: "p1"})
			setPod(t, f, "n1", Pod{Namespace: "ns2", Name: "p2", Containers: []Container{{Name: "a"}, {Name: "b"}}})
			fc.Step(5 * time.Second)
			if tt.setup != nil {
				tt.setup(f)
			}
			fc.Step(tt.step)
			s := summary(t, n)
			got := parseText(string(mustGet(t, newClient(t, f), n, "/metrics/resource")))
			if diff := cmp.Diff(seriesFromSummary(&s), got); diff != "" {
				t.Errorf("/metrics/resource disagrees with /stats/summary (-summary +metrics):\n%s", diff)
			}
		})
	}
}
