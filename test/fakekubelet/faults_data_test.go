package fakekubelet

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	stats "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/google/go-cmp/cmp"
)

// podView is what the data-fault tests read of one pod in a Summary.
type podView struct {
	Pod        string
	Time       time.Time
	Counter    uint64
	WorkingSet uint64
}

func summaryView(t *testing.T, f *Fleet, n *Node) []podView {
	t.Helper()
	var s stats.Summary
	if err := json.Unmarshal(mustGet(t, newClient(t, f), n, summaryPath+"?only_cpu_and_memory=true"), &s); err != nil {
		t.Fatal(err)
	}
	var out []podView
	for _, p := range s.Pods {
		c := p.Containers[0]
		out = append(out, podView{p.PodRef.Namespace + "/" + p.PodRef.Name, c.CPU.Time.UTC(), *c.CPU.UsageCoreNanoSeconds, *c.Memory.WorkingSetBytes})
	}
	return out
}

func TestClockBackwardsFault(t *testing.T) {
	f, fc := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	setPod(t, f, "node-a", Pod{Namespace: "ns", Name: "a"})
	fc.Step(60 * time.Second)
	at := func(d time.Duration) podView {
		return podView{"ns/a", t0.Add(d), uint64(d.Seconds()) * DefaultContainerCPU, DefaultContainerMemory}
	}
	if diff := cmp.Diff([]podView{at(60 * time.Second)}, summaryView(t, f, n)); diff != "" {
		t.Errorf("before the fault (-want +got):\n%s", diff)
	}
	if err := n.SetFault(fakecore.ClockBackwards(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]podView{at(40 * time.Second)}, summaryView(t, f, n)); diff != "" {
		t.Errorf("clock 20s back (-want +got):\n%s", diff)
	}
	fc.Step(5 * time.Second)
	if diff := cmp.Diff([]podView{at(45 * time.Second)}, summaryView(t, f, n)); diff != "" {
		t.Errorf("clock 20s back, 5s later (-want +got):\n%s", diff)
	}
	if err := n.ClearFault(fakecore.FaultClockBackwards); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]podView{at(65 * time.Second)}, summaryView(t, f, n)); diff != "" {
		t.Errorf("after clearing (-want +got):\n%s", diff)
	}
	if err := n.SetFault(fakecore.ClockBackwards(time.Millisecond)); err == nil {
		t.Error("an offset below one second was accepted")
	}
}

func TestDuplicatePodsFault(t *testing.T) {
	f, fc := newTestFleet(t, Config{})
	n := addNode(t, f, "node-a")
	setPod(t, f, "node-a", Pod{Namespace: "ns", Name: "a"})
	setPod(t, f, "node-a", Pod{Namespace: "ns", Name: "b"})
	fc.Step(10 * time.Second)
	ts := t0.Add(10 * time.Second)
	real := func(pod string) podView { return podView{pod, ts, 10 * DefaultContainerCPU, DefaultContainerMemory} }
	twice := func(pod string) podView {
		return podView{pod, ts, 20 * DefaultContainerCPU, 2 * DefaultContainerMemory}
	}

	if err := n.SetFault(Fault{Kind: FaultDuplicatePods, Pod: "ns/b"}); err != nil {
		t.Fatal(err)
	}
	want := []podView{real("ns/a"), real("ns/b"), twice("ns/b")}
	if diff := cmp.Diff(want, summaryView(t, f, n)); diff != "" {
		t.Errorf("one pod twice (-want +got):\n%s", diff)
	}
	if err := n.SetFault(Fault{Kind: FaultDuplicatePods}); err != nil {
		t.Fatal(err)
	}
	want = []podView{real("ns/a"), twice("ns/a"), real("ns/b"), twice("ns/b")}
	if diff := cmp.Diff(want, summaryView(t, f, n)); diff != "" {
		t.Errorf("every pod twice (-want +got):\n%s", diff)
	}
	// The node's own totals are untouched.
	if got := n.Summary(true).Node.CPU.UsageCoreNanoSeconds; *got != 10*(DefaultNodeBaseCPU+2*DefaultContainerCPU) {
		t.Errorf("node counter %d", *got)
	}
	if err := n.ClearFault(FaultDuplicatePods); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]podView{real("ns/a"), real("ns/b")}, summaryView(t, f, n)); diff != "" {
		t.Errorf("after clearing (-want +got):\n%s", diff)
	}
}

func TestForeignPodsFault(t *testing.T) {
	f, fc := newTestFleet(t, Config{})
	a := addNode(t, f, "node-a")
	b := addNode(t, f, "node-b")
	setPod(t, f, "node-a", Pod{Namespace: "ns", Name: "a"})
	setPod(t, f, "node-b", Pod{Namespace: "ns", Name: "b"})
	fc.Step(10 * time.Second)
	ts := t0.Add(10 * time.Second)
	if err := a.SetFault(Fault{Kind: FaultForeignPods}); err != nil {
		t.Fatal(err)
	}
	want := []podView{
		{"ns/a", ts, 10 * DefaultContainerCPU, DefaultContainerMemory},
		{"ns/b", ts, 20 * DefaultContainerCPU, 2 * DefaultContainerMemory},
	}
	if diff := cmp.Diff(want, summaryView(t, f, a)); diff != "" {
		t.Errorf("node-a with foreign pods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[1:2], summaryView(t, f, b)[:1]); diff == "" {
		t.Error("node-b reports its own pod with the foreign copy's values")
	}
	if diff := cmp.Diff([]podView{{"ns/b", ts, 10 * DefaultContainerCPU, DefaultContainerMemory}}, summaryView(t, f, b)); diff != "" {
		t.Errorf("node-b (-want +got):\n%s", diff)
	}
}

func TestTruncatedFault(t *testing.T) {
	for _, path := range []string{summaryPath, resourceMetricsPath} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			f, fc := newTestFleet(t, Config{})
			n := addNode(t, f, "node-a")
			setPod(t, f, "node-a", Pod{Namespace: "ns", Name: "a"})
			fc.Step(10 * time.Second)
			c := newClient(t, f)
			full := mustGet(t, c, n, path)
			if err := n.SetFault(Fault{Kind: fakecore.FaultTruncated}); err != nil {
				t.Fatal(err)
			}
			cut := mustGet(t, c, n, path)
			if len(cut) != len(full)/2 || !bytes.HasPrefix(full, cut) {
				t.Fatalf("got %d bytes, want the first %d of %q", len(cut), len(full)/2, full)
			}
			if path == summaryPath {
				var s stats.Summary
				if err := json.Unmarshal(cut, &s); err == nil {
					t.Errorf("a truncated summary decoded: %q", cut)
				}
			}
			if err := n.ClearFault(fakecore.FaultTruncated); err != nil {
				t.Fatal(err)
			}
			if got := mustGet(t, c, n, path); !bytes.Equal(got, full) {
				t.Errorf("after clearing: %q, want %q", got, full)
			}
		})
	}
}
