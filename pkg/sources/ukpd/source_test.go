package ukpd

import (
	"fmt"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
	"github.com/group-metrics-server/group-metrics-server/test/fakecore"
	"github.com/group-metrics-server/group-metrics-server/test/fakeukpd"
)

func nodeLister(nodes map[string]map[string]string) podcache.Nodes {
	idx := podcache.NewNodeIndex()
	for name, l := range nodes {
		idx.Set(podcache.NewNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}))
	}
	return idx
}

var kraftlet = map[string]string{"unikraft.com/virtual-kubelet": "true"}

func TestTargets(t *testing.T) {
	var eps []EndpointConfig
	for _, s := range []string{"https://edge.example;nodes=edge-1", "https://all.example", "https://none.example;node-selector=pool=none",
		"https://workers.example;node-selector=!unikraft.com/virtual-kubelet"} {
		ep, err := ParseEndpoint(s)
		must(t, err)
		eps = append(eps, ep)
	}
	src, err := NewSource(SourceConfig{Endpoints: eps, Pods: podLister(t), Nodes: nodeLister(map[string]map[string]string{
		"kraftlet-a": kraftlet, "kraftlet-b": kraftlet, "edge-1": {"unikraft.com/virtual-kubelet": "true", "pool": "edge"}, "worker-1": nil,
	})})
	must(t, err)
	if src.Name() != "ukpd" {
		t.Errorf("Name = %q", src.Name())
	}
	targets, err := src.Targets()
	must(t, err)
	got := map[string][]string{}
	for _, tg := range targets {
		got[tg.ID()] = tg.Nodes()
	}
	checkDiff(t, "Targets", map[string][]string{
		"ukpd/https://edge.example":    {"edge-1"},
		"ukpd/https://all.example":     {"kraftlet-a", "kraftlet-b"}, // edge-1 went to the first endpoint
		"ukpd/https://workers.example": {"worker-1"},
	}, got)
}

func TestNewSourceRejects(t *testing.T) {
	pods, nodes := podLister(t), nodeLister(nil)
	tests := []struct {
		name    string
		cfg     SourceConfig
		wantErr string
	}{
		{name: "no pod lister", cfg: SourceConfig{}, wantErr: "no pod lister"},
		{name: "two defaults", cfg: SourceConfig{Pods: pods, Nodes: nodes, Endpoints: []EndpointConfig{{URL: "https://a"}, {URL: "https://b"}}},
			wantErr: "default node selector"},
		{name: "selector without node lister", cfg: SourceConfig{Pods: pods, Endpoints: []EndpointConfig{{URL: "https://a"}}}, wantErr: "no node lister"},
		{name: "bad CA", cfg: SourceConfig{Pods: pods, CAFile: "/nonexistent", Endpoints: []EndpointConfig{{URL: "https://a", Nodes: []string{"n"}}}},
			wantErr: "read CA file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewSource(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewSource error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// scrapeEnv is a source with one endpoint on a fake ukpd, which mod (if
// not nil) configures, owning the kraftlet nodes kraftlet-a and kraftlet-b.
type scrapeEnv struct {
	*env
	target sources.Target
}

func newScrapeEnv(t *testing.T, format Format, mod func(*fakeukpd.Config), pods ...*corev1.Pod) *scrapeEnv {
	t.Helper()
	RegisterMetrics()
	e := newEnv(t, mod)
	return &scrapeEnv{env: e, target: oneTarget(t, SourceConfig{
		Endpoints: []EndpointConfig{{URL: e.srv.URL}},
		Nodes:     nodeLister(map[string]map[string]string{"kraftlet-a": kraftlet, "kraftlet-b": kraftlet, "worker-1": nil}),
		Pods:      podLister(t, pods...), TokenFile: e.tokenFile, CAFile: e.caFile, MetricsFormat: format, Clock: e.clk,
	})}
}

// newWebEnv is a scrapeEnv in the JSON form of default/web-0 on
// kraftlet-a, with its container app's instance, and a store.
func newWebEnv(t *testing.T, mod func(*fakeukpd.Config), cores float64, rss uint64) (*scrapeEnv, *store.Store) {
	t.Helper()
	e := newScrapeEnv(t, FormatJSON, mod, newPod("default", "web-0", "kraftlet-a", "app"))
	e.addWeb(t, cores, rss)
	return e, newStore(e.env, 30*time.Second, time.Minute)
}

func (e *scrapeEnv) scrape(t *testing.T) *sources.Batch { return scrapeOK(t, e.target) }

// scrapeInto scrapes and stores the batch in st.
func (e *scrapeEnv) scrapeInto(t *testing.T, st *store.Store) {
	t.Helper()
	st.Store(SourceName, e.target.Nodes(), e.scrape(t), e.clk.Now())
}

func TestScrapeAttributes(t *testing.T) {
	for _, format := range []Format{FormatJSON, FormatText} {
		t.Run(string(format), func(t *testing.T) { testScrapeAttributes(t, format) })
	}
}

func testScrapeAttributes(t *testing.T, format Format) {
	e := newScrapeEnv(t, format, nil,
		newPod("default", "web-0", "kraftlet-a", "app", "sidecar"), newPod("default", "api-0", "kraftlet-b", "app"),
		newPod("default", "untagged-node-0", "kraftlet-b", "app"), newPod("default", "sleepy-0", "kraftlet-a", "app"),
		newPod("other", "x-0", "worker-1", "app"),
	)
	add := func(pod, container, node string, cores float64, rss uint64, state string) {
		e.add(t, fakeukpd.InstanceSpec{Namespace: "default", Pod: pod, Container: container, Node: node, CPUCores: cores, RSSBytes: rss, State: state})
	}
	e.addWeb(t, 0.5, 64<<20)
	add("web-0", "sidecar", "kraftlet-a", 0.1, 8<<20, "")
	add("api-0", "app", "kraftlet-b", 2, 1<<30, "")
	add("untagged-node-0", "app", "", 0.25, 1<<20, "")
	add("sleepy-0", "app", "kraftlet-a", 0, 0, fakeukpd.StateStandby)
	add("gone-0", "app", "kraftlet-a", 0, 0, fakeukpd.StateStopped)
	e.add(t, fakeukpd.InstanceSpec{Tags: []string{"production"}})
	add("ghost-0", "app", "kraftlet-a", 0, 0, "")
	add("web-0", "debug", "kraftlet-a", 0, 0, "")
	e.add(t, fakeukpd.InstanceSpec{Namespace: "other", Pod: "x-0", Container: "app", Node: "worker-1"})
	e.clk.Step(5 * time.Second)
	// A second instance for api-0/app, started later: it replaces the first.
	add("api-0", "app", "kraftlet-b", 1, 512<<20, "")
	e.clk.Step(5 * time.Second)

	before := counts(t, ignoredInstances, allReasons...)
	got := e.scrape(t)
	now := t0.Add(10 * time.Second)
	pod := func(name, node string, cs ...sources.ContainerPoint) sources.PodPoint {
		return sources.PodPoint{Namespace: "default", Name: name, UID: "uid-" + name, Node: node, Containers: cs}
	}
	c := func(name string, started time.Time, cpu, mem uint64) sources.ContainerPoint {
		return sources.ContainerPoint{Name: name, Point: sources.Point{Timestamp: now, StartTime: started, CPUCoreNanos: cpu, MemoryBytes: mem}}
	}
	checkDiff(t, "Scrape", &sources.Batch{Pods: []sources.PodPoint{
		pod("api-0", "kraftlet-b", c("app", t0.Add(5*time.Second), 5e9, 512<<20)),
		// In standby, first seen: a baseline with its frozen counter and
		// its resident set, 0.
		pod("sleepy-0", "kraftlet-a", c("app", now, 0, 0)),
		pod("untagged-node-0", "kraftlet-b", c("app", t0, 2.5e9, 1<<20)),
		pod("web-0", "kraftlet-a", c("app", t0, 5e9, 64<<20), c("sidecar", t0, 1e9, 8<<20)),
	}}, got)
	// stopped gone-0 is not in the metrics
	checkGrowth(t, "ignored", ignoredInstances, before, map[string]float64{
		ignoredMissingTags: 1, ignoredPodNotFound: 1, ignoredContainerNotFound: 1, ignoredNodeNotOwned: 1, ignoredDuplicate: 1,
	})
}

// TestScrapeIntoStore follows a container through the store: steady usage,
// a restart with a new started_at, standby and a wake; on a server whose
// CPU time starts over at each start, and on one whose CPU time goes on
// over starts, as the 2024 API has it.
func TestScrapeIntoStore(t *testing.T) {
	for _, cumulative := range []bool{false, true} {
		t.Run(fmt.Sprint("cumulative CPU ", cumulative), func(t *testing.T) { testScrapeIntoStore(t, cumulative) })
	}
}

func testScrapeIntoStore(t *testing.T, cumulative bool) {
	e, st := newWebEnv(t, func(c *fakeukpd.Config) { c.CumulativeCPU = cumulative }, 0.5, 64<<20)
	uuid := e.fake.InstancesOf("default", "web-0", "app")[0]
	do := func(op func(string) error) func() { return func() { must(t, op(uuid)) } }
	restarted := uint64(1_000_000_000) // after a restart, below
	if cumulative {
		restarted = 1_500_000_000
	}
	for _, step := range []struct {
		name           string
		before         time.Duration
		act            func()
		after          time.Duration
		nanoCores, mem uint64
		window         time.Duration
	}{
		{"first scrape, average since start", 0, nil, 10 * time.Second, 500_000_000, 64 << 20, 10 * time.Second},
		{"rate change", 15 * time.Second, func() { must(t, e.fake.SetCPU(uuid, 1.5)) }, 15 * time.Second, 1_000_000_000, 64 << 20, 30 * time.Second},
		// Restarted 5 s into the next interval: the counter starts over.
		// The previous scrape stands in for the start, so the 5 s before
		// the restart count as idle: 15 core-seconds over 15 s. A counter
		// that went on is one series: the interval's true 22.5.
		{"after a restart", 5 * time.Second, do(e.fake.Restart), 10 * time.Second, restarted, 64 << 20, 15 * time.Second},
		// In standby the pod reads zero CPU and its resident set, 0, for
		// as long as it stands by.
		{"standby", 0, do(e.fake.Standby), 15 * time.Second, 0, 0, 15 * time.Second},
		{"a minute in standby", 0, nil, time.Minute, 0, 0, time.Minute},
		// Woken 7 s after a scrape: the next one reads the interval's
		// average, 8 s at 1.5 cores over 15 s, never a spike, whether the
		// counter started over or went on.
		{"after a wake", 7 * time.Second, do(e.fake.Restart), 8 * time.Second, 800_000_000, 64 << 20, 15 * time.Second},
		{"running again", 0, nil, 15 * time.Second, 1_500_000_000, 64 << 20, 15 * time.Second},
	} {
		e.clk.Step(step.before)
		if step.act != nil {
			step.act()
		}
		e.clk.Step(step.after)
		e.scrapeInto(t, st)
		c := webUsage(t, st, step.name).Containers[0]
		if c.CPUNanoCores != step.nanoCores || c.MemoryBytes != step.mem || c.Window != step.window || c.Timestamp != e.clk.Now() {
			t.Errorf("%s: usage = %+v, want %d nanocores and %d bytes over %s ending now", step.name, c.Usage, step.nanoCores, step.mem, step.window)
		}
	}

	// Draining, the instance keeps its last usage until it is stale.
	must(t, e.fake.Drain(uuid))
	e.clk.Step(15 * time.Second)
	e.scrapeInto(t, st)
	if u := webUsage(t, st, "draining"); u.Containers[0].CPUNanoCores != 1_500_000_000 {
		t.Errorf("draining: usage %+v; want the last one kept", u)
	}
	e.clk.Step(time.Minute)
	e.scrapeInto(t, st)
	if _, _, why := st.Pod("default", "web-0", "uid-web-0", "kraftlet-a", store.PodRef{}); why == nil {
		t.Error("usage of a draining instance still served after a minute")
	}
}

// TestScrapeClockOffset checks that ukpd's clock being ahead or behind the
// server's does not scale any rate: the first rate of a new instance comes
// from its uptime, not from started_at against the arrival time.
func TestScrapeClockOffset(t *testing.T) {
	for _, offset := range []time.Duration{3 * time.Second, 30 * time.Second, -30 * time.Second} {
		t.Run(offset.String(), func(t *testing.T) {
			e, st := newWebEnv(t, nil, 0.5, 1<<20)
			must(t, e.fake.SetFault(fakeukpd.ClockOffset(offset)))
			for _, window := range []time.Duration{10 * time.Second, 15 * time.Second} {
				e.clk.Step(window)
				e.scrapeInto(t, st)
				if c := webUsage(t, st, window.String()).Containers[0]; c.CPUNanoCores != 500_000_000 || c.Window != window {
					t.Errorf("usage = %+v, want 0.5 cores over %s", c.Usage, window)
				}
			}
		})
	}
}

// TestTargetsLabelsSelector checks that a selector given to the source
// replaces the kraftlet default.
func TestTargetsLabelsSelector(t *testing.T) {
	tg := oneTarget(t, SourceConfig{
		Endpoints: []EndpointConfig{{URL: "https://a"}}, Pods: podLister(t),
		Nodes:        nodeLister(map[string]map[string]string{"k": kraftlet, "w": {"role": "ukpd"}}),
		NodeSelector: labels.SelectorFromSet(labels.Set{"role": "ukpd"}),
	})
	if !gocmp.Equal(tg.Nodes(), []string{"w"}) {
		t.Errorf("target owns %v, want w", tg.Nodes())
	}
}

// TestScrapeStartedAtMovesAlone checks a started_at that moves without a
// restart (ukpd's clock set back an hour): the counter goes on, and so does
// its one series, with no rate that reads high and none lost.
func TestScrapeStartedAtMovesAlone(t *testing.T) {
	e, st := newWebEnv(t, nil, 0.04, 1)
	var lastWindowEnd time.Time
	for i := range 10 {
		if i == 3 {
			must(t, e.fake.SetFault(fakecore.ClockBackwards(time.Hour)))
		}
		e.clk.Step(15 * time.Second)
		e.scrapeInto(t, st)
		u := webUsage(t, st, fmt.Sprintf("scrape %d", i))
		if c := u.Containers[0].CPUNanoCores; c != 40_000_000 {
			t.Errorf("scrape %d: %d nanocores, want 40m", i, c)
		}
		// Every scrape yields a rate of its own, the one that saw the
		// start move too, not the old one kept.
		if i > 0 && !u.Timestamp.After(lastWindowEnd) {
			t.Errorf("scrape %d: the rate ends at %s, no later than the last one: no new rate", i, u.Timestamp)
		}
		lastWindowEnd = u.Timestamp
	}
}
