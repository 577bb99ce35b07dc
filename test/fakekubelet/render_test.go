package fakekubelet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

// fixture is one node with one two-container pod using 500m and 200Mi,
// observed 10s after it started.
func fixture(t *testing.T) *Node {
	t.Helper()
	f, fc := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	must(t, f.SetPod("node-a", Pod{
		Namespace: "default", Name: "web-0", UID: "uid-web-0",
		Labels:     map[string]string{"app": "web"},
		Containers: []Container{{Name: "app", MemoryLimit: *resource.NewQuantity(256<<20, resource.BinarySI)}, {Name: "sidecar"}},
	}))
	if got := f.SetUsage(UsageTarget{Namespace: "default", Name: "web-0"}, Usage{CPUNanoCores: 500e6, MemoryBytes: 200 << 20}); got != 1 {
		t.Fatalf("SetUsage matched %d pods, want 1", got)
	}
	fc.Step(10 * time.Second)
	return n
}

// keyPaths lists every object key of a JSON document as a dotted path,
// with "[]" for array elements.
func keyPaths(v any, prefix string, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := strings.TrimPrefix(prefix+"."+k, ".")
			out[p] = true
			keyPaths(e, p, out)
		}
	case []any:
		for _, e := range x {
			keyPaths(e, prefix+"[]", out)
		}
	}
}

func TestSummaryShape(t *testing.T) {
	want := []string{"node", "node.nodeName", "node.startTime", "node.memory.availableBytes",
		"node.systemContainers", "node.systemContainers[].name", "node.systemContainers[].startTime",
		"pods", "pods[].podRef", "pods[].podRef.name", "pods[].podRef.namespace", "pods[].podRef.uid",
		"pods[].startTime", "pods[].containers", "pods[].containers[].name", "pods[].containers[].startTime",
		"pods[].containers[].memory.availableBytes"}
	for _, prefix := range []string{"node.", "node.systemContainers[].", "pods[].", "pods[].containers[]."} {
		for _, k := range []string{"cpu", "cpu.time", "cpu.usageCoreNanoSeconds", "cpu.usageNanoCores", "memory", "memory.majorPageFaults",
			"memory.pageFaults", "memory.rssBytes", "memory.time", "memory.usageBytes", "memory.workingSetBytes"} {
			want = append(want, prefix+k)
		}
	}
	slices.Sort(want)

	n := fixture(t)
	keys := func(path string) map[string]bool {
		var doc any
		must(t, json.Unmarshal(mustGet(t, newClient(t, n.fleet), n, path), &doc))
		out := map[string]bool{}
		keyPaths(doc, "", out)
		return out
	}
	got, gotFull := keys(summaryPath+"?only_cpu_and_memory=true"), keys(summaryPath)
	checkDiff(t, "summary keys", want, slices.Sorted(maps.Keys(got)))
	for _, k := range []string{"node.fs.capacityBytes", "node.network.rxBytes", "node.rlimit.maxpid", "pods[].network.interfaces[].name", "pods[].ephemeral-storage.usedBytes", "pods[].containers[].rootfs.usedBytes"} {
		if !gotFull[k] {
			t.Errorf("full summary lacks %s", k)
		}
		if got[k] {
			t.Errorf("only_cpu_and_memory summary has %s", k)
		}
	}
}

func TestSummaryTimestampsAreRFC3339Seconds(t *testing.T) {
	n := fixture(t)
	body := string(mustGet(t, newClient(t, n.fleet), n, "/stats/summary?only_cpu_and_memory=true"))
	for _, want := range []string{`"startTime":"2026-01-02T03:04:05Z"`, `"time":"2026-01-02T03:04:15Z"`} {
		if !strings.Contains(body, want) {
			t.Errorf("summary lacks %s:\n%s", want, body)
		}
	}
}

func TestSummaryValues(t *testing.T) {
	n := fixture(t)
	s := summary(t, n)
	const mi = 1 << 20
	sampleAt := t0.Add(10 * time.Second)
	pod := func() stats.PodStats { return s.Pods[0] }
	tests := []struct {
		name string
		got  func() any
		want any
	}{
		{"node name", func() any { return s.Node.NodeName }, "node-a"},
		{"pod count", func() any { return len(s.Pods) }, 1},
		{"pod ref", func() any { return pod().PodRef }, stats.PodReference{Name: "web-0", Namespace: "default", UID: "uid-web-0"}},
		{"pod start", func() any { return pod().StartTime.UTC() }, t0},
		{"container names", func() any { return []string{pod().Containers[0].Name, pod().Containers[1].Name} }, []string{"app", "sidecar"}},
		{"container rate", func() any { return *pod().Containers[0].CPU.UsageNanoCores }, uint64(250e6)},
		{"container counter", func() any { return *pod().Containers[1].CPU.UsageCoreNanoSeconds }, uint64(2.5e9)},
		{"container cpu time", func() any { return pod().Containers[0].CPU.Time.UTC() }, sampleAt},
		{"container working set", func() any { return *pod().Containers[0].Memory.WorkingSetBytes }, uint64(100 * mi)},
		{"container usage", func() any { return *pod().Containers[0].Memory.UsageBytes }, uint64(100*mi + 100*mi/8)},
		{"container rss", func() any { return *pod().Containers[0].Memory.RSSBytes }, uint64(100*mi - 100*mi/4)},
		{"container available with limit", func() any { return *pod().Containers[0].Memory.AvailableBytes }, uint64(156 * mi)},
		{"container available without limit", func() any { return pod().Containers[1].Memory.AvailableBytes == nil }, true},
		{"pod rate", func() any { return *pod().CPU.UsageNanoCores }, uint64(500e6)},
		{"pod counter", func() any { return *pod().CPU.UsageCoreNanoSeconds }, uint64(5e9)},
		{"pod working set", func() any { return *pod().Memory.WorkingSetBytes }, uint64(200 * mi)},
		{"node rate", func() any { return *s.Node.CPU.UsageNanoCores }, uint64(600e6)},
		{"node counter", func() any { return *s.Node.CPU.UsageCoreNanoSeconds }, uint64(6e9)},
		{"node working set", func() any { return *s.Node.Memory.WorkingSetBytes }, uint64(712 * mi)},
		{"node available", func() any { return *s.Node.Memory.AvailableBytes }, uint64(64<<30 - 712*mi)},
		{"node start", func() any { return s.Node.StartTime.UTC() }, t0},
		{"system containers", func() any {
			var out []string
			for _, c := range s.Node.SystemContainers {
				out = append(out, fmt.Sprintf("%s %d %d %d", c.Name, *c.CPU.UsageNanoCores, *c.CPU.UsageCoreNanoSeconds, *c.Memory.WorkingSetBytes))
			}
			return out
		}, []string{"kubelet 50000000 500000000 268435456", "pods 500000000 5000000000 209715200", "runtime 50000000 500000000 268435456"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDiff(t, tt.name, tt.want, tt.got())
		})
	}
}

func TestResourceMetricsText(t *testing.T) {
	n := fixture(t)
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
	checkDiff(t, "/metrics/resource", want, got)
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
	got := slices.DeleteFunc(strings.Split(buf.String(), "\n"), func(l string) bool {
		return !strings.HasPrefix(l, "container_cpu_usage_seconds_total")
	})
	want := []string{
		`container_cpu_usage_seconds_total{container="a\nb",namespace="a",pod="we\"ird\\"} 0 1767323045000`,
		`container_cpu_usage_seconds_total{container="c",namespace="a",pod="we\"ird\\"} 1.5 1767323045000`,
		`container_cpu_usage_seconds_total{container="c",namespace="z",pod="b"} 1e-09 1767323045000`,
	}
	checkDiff(t, "CPU series", want, got)
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
		setup func(f *Fleet, n *Node)
		step  time.Duration
	}{
		{name: "defaults", step: 7 * time.Second},
		{name: "pod usage", step: 1500 * time.Millisecond, setup: func(f *Fleet, _ *Node) {
			f.SetUsage(UsageTarget{Namespace: "ns1", Name: "p1"}, Usage{CPUNanoCores: 1234567, MemoryBytes: 98765432})
		}},
		{name: "container usage", step: 61 * time.Second, setup: func(f *Fleet, _ *Node) {
			f.SetUsage(UsageTarget{Namespace: "ns2", Name: "p2", Container: "b"}, Usage{CPUNanoCores: 3e9, MemoryBytes: 1 << 30})
		}},
		{name: "counter reset", step: 3 * time.Second, setup: func(_ *Fleet, n *Node) { n.ResetCounters() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, fc := newTestFleet(t, Config{})
			n := addNode(t, f, "n1")
			must(t, f.SetPod("n1", Pod{Namespace: "ns1", Name: "p1"}))
			must(t, f.SetPod("n1", Pod{Namespace: "ns2", Name: "p2", Containers: []Container{{Name: "a"}, {Name: "b"}}}))
			fc.Step(5 * time.Second)
			if tt.setup != nil {
				tt.setup(f, n)
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
