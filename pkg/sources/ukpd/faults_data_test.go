package ukpd

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

// TestScrapeDataFaults gives the fake ukpd each fault a scrape survives and
// follows a pod from the scrape through the store: it is served with the
// values the fake was told, never higher, and the instances left out are
// counted. ClockBackwards is TestScrapeStartedAtMovesAlone's.
func TestScrapeDataFaults(t *testing.T) {
	const (
		cycle = 15 * time.Second
		cpu   = 40_000_000 // nanocores of each container
		mem   = 64 << 20
	)
	tests := []struct {
		name  string
		fault fakeukpd.Fault
		// reset says the fault sets the counters back: the first rate
		// after it may read low.
		reset bool
		// ignored is how many instances each scrape leaves out, by reason.
		ignored map[string]float64
	}{
		// The counter starts from zero with a new start count and the same
		// started_at.
		{name: "counter reset", fault: fakeukpd.Fault{Kind: fakecore.FaultCounterReset}, reset: true},
		// A second instance for every container, with twice the values.
		{name: "duplicate instances", fault: fakeukpd.Fault{Kind: fakeukpd.FaultDuplicateInstances}, ignored: map[string]float64{ignoredDuplicate: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newScrapeEnv(t, FormatJSON, newPod("default", "web-0", "kraftlet-a", "app", "sidecar"))
			for _, c := range []string{"app", "sidecar"} {
				e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: "web-0", Container: c, Node: "kraftlet-a", CPUCores: cpu / 1e9, RSSBytes: mem})
			}
			st := newStore(e.env, 2*cycle, 4*cycle)
			var counter uint64 // of the first container, in the last scrape
			scrape := func() {
				t.Helper()
				e.clk.Step(cycle)
				b := e.scrape(t)
				if len(b.Pods) != 1 {
					t.Fatalf("pods %+v, want web-0", b.Pods)
				}
				counter = b.Pods[0].Containers[0].CPUCoreNanos
				st.Store(SourceName, e.target.Nodes(), b, e.clk.Now())
			}
			scrape()
			scrape()
			before := counter
			must(t, e.fake.SetFault(tc.fault))
			for i := range 4 {
				ignoredBefore := counts(t, ignoredInstances, allReasons...)
				scrape()
				if i == 0 && (counter < before) != tc.reset {
					t.Errorf("CPU counter went from %d to %d over the fault", before, counter)
				}
				if got := growth(t, ignoredInstances, ignoredBefore); !maps.Equal(got, tc.ignored) {
					t.Errorf("scrape %d: ignored %v, want %v", i, got, tc.ignored)
				}
				for _, c := range webUsage(t, st, fmt.Sprintf("scrape %d", i)).Containers {
					low := tc.reset && i == 0 && c.CPUNanoCores < cpu
					if (c.CPUNanoCores != cpu && !low) || c.MemoryBytes != mem {
						t.Errorf("scrape %d: %s served %+v, want %d nanocores and %d bytes", i, c.Name, c.Usage, cpu, mem)
					}
				}
			}
		})
	}
}
