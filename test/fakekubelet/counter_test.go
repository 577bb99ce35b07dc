package fakekubelet

import (
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
	testingclock "k8s.io/utils/clock/testing"
)

// observation is what one container looks like in a summary.
type observation struct {
	Time      time.Time
	Start     time.Time
	Rate      uint64
	Counter   uint64
	PodCount  uint64
	NodeCount uint64
}

func observe(t *testing.T, n *Node, ns, name string) observation {
	t.Helper()
	s := n.Summary(true)
	for _, p := range s.Pods {
		if p.PodRef.Namespace == ns && p.PodRef.Name == name {
			c := p.Containers[0]
			return observation{
				Time: c.CPU.Time.UTC(), Start: c.StartTime.UTC(),
				Rate: *c.CPU.UsageNanoCores, Counter: *c.CPU.UsageCoreNanoSeconds,
				PodCount: *p.CPU.UsageCoreNanoSeconds, NodeCount: *s.Node.CPU.UsageCoreNanoSeconds,
			}
		}
	}
	t.Fatalf("pod %s/%s not in summary", ns, name)
	return observation{}
}

func TestCounterIntegration(t *testing.T) {
	const base = DefaultNodeBaseCPU
	type step func(t *testing.T, f *Fleet, fc *testingclock.FakeClock)
	advance := func(d time.Duration) step {
		return func(_ *testing.T, _ *Fleet, fc *testingclock.FakeClock) { fc.Step(d) }
	}
	cores := func(nano uint64) step {
		return func(t *testing.T, f *Fleet, _ *testingclock.FakeClock) {
			if f.SetUsage(UsageTarget{Namespace: "ns", Name: "p"}, Usage{CPUNanoCores: nano, MemoryBytes: 1 << 20}) != 1 {
				t.Fatal("pod not matched")
			}
		}
	}
	tests := []struct {
		name  string
		pod   Pod
		steps []step
		want  observation
	}{
		{
			name:  "default rate integrates over elapsed time",
			steps: []step{advance(10 * time.Second)},
			want: observation{Time: t0.Add(10 * time.Second), Start: t0, Rate: DefaultContainerCPU, Counter: 10 * DefaultContainerCPU,
				PodCount: 10 * DefaultContainerCPU, NodeCount: 10 * (base + DefaultContainerCPU)},
		},
		{
			name:  "sample time is quantised to the second",
			steps: []step{advance(2500 * time.Millisecond)},
			want: observation{Time: t0.Add(2 * time.Second), Start: t0, Rate: DefaultContainerCPU, Counter: 2 * DefaultContainerCPU,
				PodCount: 2 * DefaultContainerCPU, NodeCount: 2 * (base + DefaultContainerCPU)},
		},
		{
			name:  "rate change takes effect from the current sample instant",
			steps: []step{advance(4 * time.Second), cores(2e9), advance(3 * time.Second)},
			want: observation{Time: t0.Add(7 * time.Second), Start: t0, Rate: 2e9, Counter: 4*DefaultContainerCPU + 6e9,
				PodCount: 4*DefaultContainerCPU + 6e9, NodeCount: 7*base + 4*DefaultContainerCPU + 6e9},
		},
		{
			name:  "mid-second change counts from the second's start",
			steps: []step{advance(4300 * time.Millisecond), cores(1e9), advance(1700 * time.Millisecond)},
			want: observation{Time: t0.Add(6 * time.Second), Start: t0, Rate: 1e9, Counter: 4*DefaultContainerCPU + 2e9,
				PodCount: 4*DefaultContainerCPU + 2e9, NodeCount: 6*base + 4*DefaultContainerCPU + 2e9},
		},
		{
			name:  "zero rate freezes the counter",
			steps: []step{cores(5e8), advance(2 * time.Second), cores(0), advance(time.Hour)},
			want: observation{Time: t0.Add(time.Hour + 2*time.Second), Start: t0, Rate: 0, Counter: 1e9,
				PodCount: 1e9, NodeCount: (3600+2)*base + 1e9},
		},
		{
			name: "pod that started earlier has accumulated usage",
			pod:  Pod{StartTime: t0.Add(-100 * time.Second)},
			want: observation{Time: t0, Start: t0.Add(-100 * time.Second), Rate: DefaultContainerCPU, Counter: 100 * DefaultContainerCPU,
				PodCount: 100 * DefaultContainerCPU, NodeCount: 0},
		},
		{
			name: "pod counter reset restarts from zero with a new start time",
			steps: []step{advance(5 * time.Second), func(t *testing.T, f *Fleet, _ *testingclock.FakeClock) {
				must(t, f.ResetPodCounters("ns", "p"))
			}, advance(2 * time.Second)},
			want: observation{Time: t0.Add(7 * time.Second), Start: t0.Add(5 * time.Second), Rate: DefaultContainerCPU, Counter: 2 * DefaultContainerCPU,
				PodCount: 2 * DefaultContainerCPU, NodeCount: 7 * (base + DefaultContainerCPU)},
		},
		{
			name: "node counter reset keeps the node counter monotonic",
			steps: []step{advance(5 * time.Second), func(t *testing.T, f *Fleet, _ *testingclock.FakeClock) {
				n, _ := f.Node("n")
				must(t, n.SetFault(Fault{Kind: fakecore.FaultCounterReset}))
			}},
			want: observation{Time: t0.Add(5 * time.Second), Start: t0.Add(5 * time.Second), Rate: DefaultContainerCPU, Counter: 0,
				PodCount: 0, NodeCount: 5 * (base + DefaultContainerCPU)},
		},
		{
			name:  "large rate over a long time does not overflow",
			steps: []step{cores(64e9), advance(30 * 24 * time.Hour)},
			want: observation{Time: t0.Add(30 * 24 * time.Hour), Start: t0, Rate: 64e9, Counter: 64 * 30 * 24 * 3600 * 1e9,
				PodCount: 64 * 30 * 24 * 3600 * 1e9, NodeCount: 30*24*3600*base + 64*30*24*3600*1e9},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, fc := newTestFleet(t, Config{})
			n := addNode(t, f, "n")
			p := tt.pod
			p.Namespace, p.Name = "ns", "p"
			setPod(t, f, "n", p)
			for _, s := range tt.steps {
				s(t, f, fc)
			}
			if diff := cmp.Diff(tt.want, observe(t, n, "ns", "p")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUsageSpreadAndRules(t *testing.T) {
	f, _ := newTestFleet(t, Config{})
	addNode(t, f, "n1")
	addNode(t, f, "n2")
	three := []Container{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	setPod(t, f, "n1", Pod{Namespace: "ns", Name: "web-1", Labels: map[string]string{"app": "web"}, Containers: three})
	setPod(t, f, "n2", Pod{Namespace: "ns", Name: "db-1", Labels: map[string]string{"app": "db"}})

	sel, err := labels.Parse("app=web")
	must(t, err)
	if got := f.SetUsage(UsageTarget{Namespace: "ns", Selector: sel}, Usage{CPUNanoCores: 1e9 + 1, MemoryBytes: 100}); got != 1 {
		t.Fatalf("selector matched %d pods, want 1", got)
	}
	// A replica placed later picks the remembered usage up.
	setPod(t, f, "n2", Pod{Namespace: "ns", Name: "web-2", Labels: map[string]string{"app": "web"}})
	f.SetUsage(UsageTarget{Namespace: "ns", Name: "db-1", Container: "main"}, Usage{CPUNanoCores: 7, MemoryBytes: 8})

	usage := map[string]Usage{}
	for _, n := range f.Nodes() {
		for _, p := range n.State(true).Pods {
			for _, c := range p.Containers {
				usage[p.PodRef.Name+"/"+c.Name] = containerUsage(c)
			}
		}
	}
	want := map[string]Usage{
		"web-1/a":    {CPUNanoCores: 333333334, MemoryBytes: 34},
		"web-1/b":    {CPUNanoCores: 333333334, MemoryBytes: 33},
		"web-1/c":    {CPUNanoCores: 333333333, MemoryBytes: 33},
		"web-2/main": {CPUNanoCores: 1e9 + 1, MemoryBytes: 100},
		"db-1/main":  {CPUNanoCores: 7, MemoryBytes: 8},
	}
	if diff := cmp.Diff(want, usage); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := f.SetUsage(UsageTarget{Namespace: "ns", Name: "db-1", Container: "missing"}, Usage{CPUNanoCores: 1}); got != 0 {
		t.Errorf("missing container matched %d pods", got)
	}
}
