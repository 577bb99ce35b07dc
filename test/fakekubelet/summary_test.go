package fakekubelet

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/google/go-cmp/cmp"
)

// fixture is one node with one two-container pod using 500m and 200Mi,
// observed 10s after it started.
func fixture(t *testing.T) (*Fleet, *Node) {
	t.Helper()
	f, fc := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	setPod(t, f, "node-a", Pod{
		Namespace: "default", Name: "web-0", UID: "uid-web-0",
		Labels:     map[string]string{"app": "web"},
		Containers: []Container{{Name: "app", MemoryLimit: *resource.NewQuantity(256<<20, resource.BinarySI)}, {Name: "sidecar"}},
	})
	if got := f.SetUsage(UsageTarget{Namespace: "default", Name: "web-0"}, Usage{CPUNanoCores: 500e6, MemoryBytes: 200 << 20}); got != 1 {
		t.Fatalf("SetUsage matched %d pods, want 1", got)
	}
	fc.Step(10 * time.Second)
	return f, n
}

// keyPaths lists every object key of a JSON document as a dotted path,
// with "[]" for array elements.
func keyPaths(v any, prefix string, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
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

	_, n := fixture(t)
	keys := func(path string) map[string]bool {
		var doc any
		must(t, json.Unmarshal(mustGet(t, newClient(t, n.fleet), n, path), &doc))
		out := map[string]bool{}
		keyPaths(doc, "", out)
		return out
	}
	got, gotFull := keys(summaryPath+"?only_cpu_and_memory=true"), keys(summaryPath)
	if diff := cmp.Diff(want, slices.Sorted(maps.Keys(got))); diff != "" {
		t.Errorf("summary keys (-want +got):\n%s", diff)
	}
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
	_, n := fixture(t)
	body := string(mustGet(t, newClient(t, n.fleet), n, "/stats/summary?only_cpu_and_memory=true"))
	for _, want := range []string{`"startTime":"2026-01-02T03:04:05Z"`, `"time":"2026-01-02T03:04:15Z"`} {
		if !strings.Contains(body, want) {
			t.Errorf("summary lacks %s:\n%s", want, body)
		}
	}
}

func TestSummaryValues(t *testing.T) {
	_, n := fixture(t)
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
			if diff := cmp.Diff(tt.want, tt.got()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
