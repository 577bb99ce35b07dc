package store

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// sp is a sample of metric "m" of pod ns/p (UID uid-p), read at ts.
func sp(series string, v float64, ts time.Duration) sources.SeriesPoint {
	return sources.SeriesPoint{Namespace: "ns", Pod: "p", UID: "uid-p", Metric: "m", Series: "s=" + series + "\x00",
		Value: v, Timestamp: at(ts)}
}

func counter(p sources.SeriesPoint) sources.SeriesPoint { p.Counter = true; return p }

func exporter(p sources.SeriesPoint) sources.SeriesPoint { p.Exporter = true; return p }

func inContainer(c string, p sources.SeriesPoint) sources.SeriesPoint { p.Container = c; return p }

// values reads pod ns/p's metric "m" as its UID's, series by series.
func values(s *Store) map[string]float64 {
	out := map[string]float64{}
	for _, v := range s.Series("ns", "p", "uid-p", "m") {
		out[v.Container+"/"+v.Labels()["s"]] = v.Value
	}
	return out
}

// TestNamedSeries drives a store through writes of named series, one step
// after another, and checks what pod ns/p is served after each.
func TestNamedSeries(t *testing.T) {
	type write struct {
		target string
		points []sources.SeriesPoint
	}
	type served = map[string]float64
	// own is a write of pod ns/p's own target.
	own := func(points ...sources.SeriesPoint) []write { return []write{{"pod/ns/p", points}} }
	steps := []struct {
		name    string
		advance time.Duration // moves the clock before the writes
		writes  []write
		prune   []string // when not nil, the targets kept
		want    served
	}{
		{name: "a gauge is served at once, a counter not before its second sample", want: served{"/g": 7},
			writes: own(sp("g", 7, 0), counter(sp("c", 100, 0)))},
		{name: "a counter's rate over its last two samples", advance: 10 * time.Second, want: served{"/g": 8, "/c": 5},
			writes: own(sp("g", 8, 10*time.Second), counter(sp("c", 150, 10*time.Second)))},
		{name: "a counter that went back was reset: no rate", advance: 10 * time.Second, want: served{},
			writes: own(counter(sp("c", 3, 20*time.Second)))},
		{name: "the reset counter is the next rate's baseline", advance: 10 * time.Second, want: served{"/c": 2},
			writes: own(counter(sp("c", 23, 30*time.Second)))},
		{name: "a sample of the same time gives no rate", want: served{}, writes: own(counter(sp("c", 30, 30*time.Second)))},
		{name: "a rate past the bound is garbage", advance: time.Second, want: served{}, writes: own(counter(sp("c", 2e10, 31*time.Second)))},
		{name: "a NaN is no rate", advance: time.Second, want: served{}, writes: own(counter(sp("c", math.NaN(), 32*time.Second)))},
		{name: "an exporter's series of a container the pod's own target has are hidden; of another, served",
			writes: []write{
				{"pod/ns/p", []sources.SeriesPoint{inContainer("vllm", sp("own", 1, 32*time.Second))}},
				{"exporter/dcgm/gpu/a", []sources.SeriesPoint{
					exporter(inContainer("vllm", sp("gpu0", 50, 32*time.Second))), exporter(inContainer("side", sp("gpu1", 60, 32*time.Second))),
				}},
				// The DaemonSet's next pod on the node reports the same GPU.
				{"exporter/dcgm/gpu/b", []sources.SeriesPoint{exporter(inContainer("side", sp("gpu1", 61, 32*time.Second)))}},
			},
			want: served{"vllm/own": 1, "side/gpu1": 60}},
		{name: "a target that hands over nothing holds nothing", writes: own(), want: served{"vllm/gpu0": 50, "side/gpu1": 60}},
		{name: "a target no longer scraped is pruned", prune: []string{"exporter/dcgm/gpu/b"}, want: served{"side/gpu1": 61}},
		{name: "series are stale StaleAfter after the scrape that brought them", advance: 41 * time.Second, want: served{}},
	}
	clk := clocktesting.NewFakeClock(at(0))
	s := newTestStore(clk, "endpoints")
	for _, st := range steps {
		clk.Step(st.advance)
		for _, w := range st.writes {
			s.StoreSeries("endpoints", w.target, w.points, clk.Now())
		}
		if st.prune != nil {
			keep := map[string]struct{}{}
			for _, id := range st.prune {
				keep[id] = struct{}{}
			}
			s.PruneSeries("endpoints", keep)
		}
		if diff := cmp.Diff(st.want, values(s), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", st.name, diff)
		}
	}
}

// TestNamedSeriesOfAnotherPod: series are served only to the pod of the UID
// they were read for, and a recreated pod's counter starts a new series
// rather than a rate across two pods.
func TestNamedSeriesOfAnotherPod(t *testing.T) {
	clk := clocktesting.NewFakeClock(at(0))
	s := newTestStore(clk, "endpoints")
	s.StoreSeries("endpoints", "pod/ns/p", []sources.SeriesPoint{sp("g", 7, 0), counter(sp("c", 100, 0))}, clk.Now())
	if got := s.Series("ns", "p", "uid-other", "m"); len(got) != 0 {
		t.Errorf("read as another pod's: %+v, want nothing", got)
	}
	if got := s.Series("ns", "p", "", "m"); len(got) != 1 || got[0].Value != 7 {
		t.Errorf("read with no UID: %+v, want the gauge", got)
	}
	clk.Step(10 * time.Second)
	reborn := counter(sp("c", 6000, 10*time.Second))
	reborn.UID = "uid-p-2"
	s.StoreSeries("endpoints", "pod/ns/p", []sources.SeriesPoint{reborn}, clk.Now())
	if got := s.Series("ns", "p", "uid-p-2", "m"); len(got) != 0 {
		t.Errorf("the recreated pod's first sample: %+v, want no rate", got)
	}
}

// TestNodeSumOfPods: a source that reports no node-level usage (ukpd) gives
// a node the sum of its pods' usage, once every container has some.
func TestNodeSumOfPods(t *testing.T) {
	clk := clocktesting.NewFakeClock(at(10 * time.Second))
	s := newTestStore(clk, "ukpd")
	pods := func(ts time.Duration, cpuA, cpuB uint64) *sources.Batch {
		return &sources.Batch{Pods: []sources.PodPoint{
			{Namespace: "ns", Name: "a", Node: "kraftlet", Containers: []sources.ContainerPoint{{Name: "c", Point: pt(ts, -time.Hour, cpuA, 1<<20)}}},
			{Namespace: "ns", Name: "b", Node: "kraftlet", Containers: []sources.ContainerPoint{{Name: "c", Point: pt(ts, -time.Hour, cpuB, 2<<20)}}},
		}}
	}
	s.Store("ukpd", []string{"kraftlet"}, pods(0, 0, 0), clk.Now())
	if _, why := s.Node("kraftlet"); why == nil || !strings.Contains(why.Reason, "has none yet") {
		t.Fatalf("after one sample: %v, want the pods' usage pending", why)
	}
	clk.Step(10 * time.Second)
	s.Store("ukpd", []string{"kraftlet"}, pods(10*time.Second, 5e9, 10e9), clk.Now())
	u, why := s.Node("kraftlet")
	want := Usage{Timestamp: at(10 * time.Second), Window: 10 * time.Second, CPUNanoCores: 1.5e9, MemoryBytes: 3 << 20}
	if why != nil || u != want {
		t.Errorf("node = %+v, %v; want %+v", u, why, want)
	}
	s.Store("ukpd", []string{"kraftlet"}, &sources.Batch{}, clk.Now())
	if _, why := s.Node("kraftlet"); why == nil || !strings.Contains(why.Reason, "runs no pod") {
		t.Errorf("with no pods: %v, want no usage", why)
	}
}
