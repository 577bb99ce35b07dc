package kubelet

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakekubelet"
)

// TestDataFaults gives node-a each fault a scrape survives and follows every
// pod from the Summary through the store: a pod is served with the values
// its own kubelet was told, never higher, or, when its node listed it
// twice, not at all, and the scrape says what it left out (the scraper
// counts such a scrape as partial, TestTickKeepsPartialResults).
func TestDataFaults(t *testing.T) {
	const (
		cycle = 15 * time.Second
		cpu   = 50_000_000 // nanocores of every pod's one container
		mem   = 40 << 20
	)
	tests := []struct {
		name  string
		fault fakekubelet.Fault
		// podsOfA are the pods of node-a's batch under the fault, dropped
		// those served by no node, and wantErr what node-a's scrape says it
		// left out.
		podsOfA []string
		dropped map[string]bool
		wantErr string
		// behind is how far node-a's samples are behind the clock, and
		// restarted says its counters began again at the fault.
		behind    time.Duration
		restarted bool
	}{
		{name: "counter reset", fault: fakekubelet.Fault{Kind: fakecore.FaultCounterReset}, podsOfA: []string{"a-0", "a-1"}, restarted: true},
		{name: "clock backwards", fault: fakecore.ClockBackwards(3 * cycle), podsOfA: []string{"a-0", "a-1"}, behind: 3 * cycle},
		// node-a lists node-b's pod too, with twice its values.
		{name: "foreign pods", fault: fakekubelet.Fault{Kind: fakekubelet.FaultForeignPods}, podsOfA: []string{"a-0", "a-1", "b-0"}},
		{name: "duplicate pods", fault: fakekubelet.Fault{Kind: fakekubelet.FaultDuplicatePods, Pod: "ns/a-1"},
			podsOfA: []string{"a-0"}, dropped: map[string]bool{"a-1": true}, wantErr: `pod ns/a-1: listed 2 times`},
	}
	onNode := map[string]string{"a-0": "node-a", "a-1": "node-a", "b-0": "node-b"}
	// The resource endpoint names a pod by its series, so a pod listed
	// twice is its container listed twice.
	words := map[Endpoint]*strings.Replacer{
		EndpointSummary:  strings.NewReplacer(),
		EndpointResource: strings.NewReplacer("listed 2 times", `container "main" listed twice`),
	}
	for _, ep := range Endpoints {
		for _, tc := range tests {
			t.Run(string(ep)+"/"+tc.name, func(t *testing.T) {
				e := newFleetEnv(t)
				began := e.clk.Now()
				nodes := []*fakekubelet.Node{e.addNode(t, "node-a", "a-0", "a-1"), e.addNode(t, "node-b", "b-0")}
				e.fleet.SetUsage(fakekubelet.UsageTarget{Namespace: "ns"}, fakekubelet.Usage{CPUNanoCores: cpu, MemoryBytes: mem})
				c := e.client(t, func(cfg *ClientConfig) { cfg.Endpoint = ep })
				st := store.New(store.Config{Clock: e.clk, Sources: []string{SourceName}, FirstWindowMax: 2 * cycle, StaleAfter: 4 * cycle})

				// scrape moves the clock a cycle on and stores both nodes, as
				// the scraper stores a partial batch; it returns node-a's batch
				// and what that scrape left out.
				scrape := func() (batchA *sources.Batch, errA error) {
					t.Helper()
					e.clk.Step(cycle)
					for _, n := range nodes {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						b, err := c.Scrape(ctx, n.Name(), n.Address(), "")
						cancel()
						if b == nil {
							t.Fatalf("scrape %s: %v", n.Name(), err)
						}
						if n == nodes[0] {
							batchA, errA = b, err
						} else if err != nil {
							t.Errorf("scrape %s: %v", n.Name(), err)
						}
						st.Store(SourceName, []string{n.Name()}, b, e.clk.Now())
					}
					return batchA, errA
				}
				// Samples of pods 4 cycles old: a clock 3 cycles back still
				// samples them after they started.
				for range 4 {
					_, err := scrape()
					must(t, err)
				}
				faultAt := e.clk.Now()
				must(t, nodes[0].SetFault(tc.fault))
				for i := range 4 {
					batch, err := scrape()
					switch {
					case tc.wantErr == "" && err != nil:
						t.Errorf("scrape %d of node-a: %v", i, err)
					case tc.wantErr != "" && (sources.Reason(err) != sources.ReasonDecode || !strings.Contains(err.Error(), words[ep].Replace(tc.wantErr))):
						t.Errorf("scrape %d of node-a: error %v, want a %s error saying %q", i, err, sources.ReasonDecode, words[ep].Replace(tc.wantErr))
					}
					// node-a's batch shows the fault: the pods it lists, and a-0's
					// sample time and start.
					var names []string
					for _, p := range batch.Pods {
						names = append(names, p.Name)
					}
					if diff := cmp.Diff(tc.podsOfA, names); diff != "" {
						t.Errorf("scrape %d: pods of node-a (-want +got):\n%s", i, diff)
					}
					sampled, started := e.clk.Now().Add(-tc.behind), map[bool]time.Time{false: began, true: faultAt}[tc.restarted]
					if p := batch.Pods[0].Containers[0].Point; !p.Timestamp.Equal(sampled) || !p.StartTime.Equal(started) {
						t.Errorf("scrape %d: a-0 sampled at %s, started %s; want %s, %s", i, p.Timestamp, p.StartTime, sampled, started)
					}
					for pod, node := range onNode {
						u, _, why := st.Pod("ns", pod, "", node, store.PodRef{})
						switch {
						case tc.dropped[pod] && why == nil:
							t.Errorf("scrape %d: %s served with %+v, want it left out", i, pod, u.Containers)
						case tc.dropped[pod]:
						case why != nil:
							t.Errorf("scrape %d: %s not served: %v", i, pod, why)
						case u.Containers[0].CPUNanoCores != cpu || u.Containers[0].MemoryBytes != mem:
							t.Errorf("scrape %d: %s served %+v, want %d nanocores and %d bytes", i, pod, u.Containers[0].Usage, cpu, mem)
						}
					}
				}
			})
		}
	}
}
