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
	// obs is what the pod's one container shows at+after t0, started at
	// start+t0; the pod's counter is the container's.
	obs := func(at, start time.Duration, rate, counter, node uint64) observation {
		return observation{Time: t0.Add(at), Start: t0.Add(start), Rate: rate, Counter: counter, PodCount: counter, NodeCount: node}
	}
	const c, sec = DefaultContainerCPU, time.Second
	tests := []struct {
		name  string
		pod   Pod
		steps []step
		want  observation
	}{
		{name: "default rate integrates over elapsed time", steps: []step{advance(10 * sec)}, want: obs(10*sec, 0, c, 10*c, 10*(base+c))},
		{name: "sample time is quantised to the second", steps: []step{advance(2500 * time.Millisecond)}, want: obs(2*sec, 0, c, 2*c, 2*(base+c))},
		{name: "rate change takes effect from the current sample instant", steps: []step{advance(4 * sec), cores(2e9), advance(3 * sec)},
			want: obs(7*sec, 0, 2e9, 4*c+6e9, 7*base+4*c+6e9)},
		{name: "mid-second change counts from the second's start", steps: []step{advance(4300 * time.Millisecond), cores(1e9), advance(1700 * time.Millisecond)},
			want: obs(6*sec, 0, 1e9, 4*c+2e9, 6*base+4*c+2e9)},
		{name: "zero rate freezes the counter", steps: []step{cores(5e8), advance(2 * sec), cores(0), advance(time.Hour)},
			want: obs(time.Hour+2*sec, 0, 0, 1e9, (3600+2)*base+1e9)},
		{name: "pod that started earlier has accumulated usage", pod: Pod{StartTime: t0.Add(-100 * sec)}, want: obs(0, -100*sec, c, 100*c, 0)},
		{name: "pod counter reset restarts from zero with a new start time", steps: []step{advance(5 * sec), func(t *testing.T, f *Fleet, _ *testingclock.FakeClock) {
			must(t, f.ResetPodCounters("ns", "p"))
		}, advance(2 * sec)}, want: obs(7*sec, 5*sec, c, 2*c, 7*(base+c))},
		{name: "node counter reset keeps the node counter monotonic", steps: []step{advance(5 * sec), func(t *testing.T, f *Fleet, _ *testingclock.FakeClock) {
			n, _ := f.Node("n")
			must(t, n.SetFault(Fault{Kind: fakecore.FaultCounterReset}))
		}}, want: obs(5*sec, 5*sec, c, 0, 5*(base+c))},
		{name: "large rate over a long time does not overflow", steps: []step{cores(64e9), advance(30 * 24 * time.Hour)},
			want: obs(30*24*time.Hour, 0, 64e9, 64*30*24*3600*1e9, 30*24*3600*base+64*30*24*3600*1e9)},
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

	want := map[string]Usage{
		"ns/web-1/a":    {CPUNanoCores: 333333334, MemoryBytes: 34},
		"ns/web-1/b":    {CPUNanoCores: 333333334, MemoryBytes: 33},
		"ns/web-1/c":    {CPUNanoCores: 333333333, MemoryBytes: 33},
		"ns/web-2/main": {CPUNanoCores: 1e9 + 1, MemoryBytes: 100},
		"ns/db-1/main":  {CPUNanoCores: 7, MemoryBytes: 8},
	}
	if diff := cmp.Diff(want, usages(f)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := f.SetUsage(UsageTarget{Namespace: "ns", Name: "db-1", Container: "missing"}, Usage{CPUNanoCores: 1}); got != 0 {
		t.Errorf("missing container matched %d pods", got)
	}
}
