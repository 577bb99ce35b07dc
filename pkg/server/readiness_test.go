package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// oneSource is a source of fixed targets.
type oneSource []sources.Target

func (oneSource) Name() string                         { return "kubelet" }
func (s oneSource) Targets() ([]sources.Target, error) { return s, nil }

// nodeTarget is a node whose kubelet reports the node and, from the tick
// newFrom on, a new container too; every counter began a day ago unless
// new. down fails every scrape.
type nodeTarget struct {
	name    string
	clk     *clocktesting.FakeClock
	down    bool
	newFrom int
	ticks   int
}

func (n *nodeTarget) ID() string      { return "node/" + n.name }
func (n *nodeTarget) Nodes() []string { return []string{n.name} }

func (n *nodeTarget) Scrape(context.Context) (*sources.Batch, error) {
	n.ticks++
	if n.down {
		return nil, sources.WithReason(sources.ReasonConnection, errors.New("refused"))
	}
	now := n.clk.Now()
	point := func(start time.Time) sources.Point {
		return sources.Point{Timestamp: now, StartTime: start, CPUCoreNanos: uint64(n.ticks) * 1e9, MemoryBytes: 1}
	}
	b := &sources.Batch{Nodes: []sources.NodePoint{{Name: n.name, Point: point(now.Add(-24 * time.Hour))}}}
	if n.newFrom > 0 && n.ticks >= n.newFrom {
		b.Pods = []sources.PodPoint{{Namespace: "ns", Name: "new", Node: n.name, Containers: []sources.ContainerPoint{
			{Name: "c", Point: point(now.Add(-time.Second))}, // too young for a first rate
		}}}
	}
	return b, nil
}

// TestStartupGate: a starting replica waits for every answering target to
// give usage for all it reports (a node down does not hold it), at most
// maxStartupTicks; once open, the gate stays open.
func TestStartupGate(t *testing.T) {
	tests := []struct {
		name    string
		targets []*nodeTarget // on the test's clock
		want    []string      // the gate's answer after each tick: "" open, else a part of its error
	}{
		{name: "open once each answering node has its second sample", targets: []*nodeTarget{{name: "a"}, {name: "down", down: true}},
			want: []string{"1 of 1 answering targets", "", ""}},
		{name: "a container arriving after the gate opened does not close it", targets: []*nodeTarget{{name: "a", newFrom: 3}},
			want: []string{"1 of 1 answering targets", "", ""}},
		{name: "a target that stays incomplete holds the gate for maxStartupTicks at most",
			targets: []*nodeTarget{{name: "a", newFrom: 1}},
			want:    []string{"1 of 1 answering targets", "1 of 1 answering targets", "1 of 1 answering targets", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
			var src oneSource
			for _, n := range tt.targets {
				n.clk, src = clk, append(src, n)
			}
			st := store.New(store.Config{Clock: clk, Sources: []string{"kubelet"}, FirstWindowMax: 30 * time.Second, StaleAfter: time.Minute})
			sc := sources.NewScraper(sources.ScraperConfig{Sources: []sources.Source{src}, Sink: st, Clock: clk,
				Resolution: 15 * time.Second, Timeout: 5 * time.Second, Concurrency: 2})
			gate := &startupGate{scraper: sc, store: st}
			if err := gate.check(); err == nil || !strings.Contains(err.Error(), "0 of the 1 scrape ticks") {
				t.Fatalf("before the first tick: %v, want not ready", err)
			}
			for i, want := range tt.want {
				if i > 0 {
					clk.Step(15 * time.Second)
				}
				sc.Tick(t.Context())
				err := gate.check()
				if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
					t.Fatalf("after tick %d: %v, want %q", i+1, err, want)
				}
			}
		})
	}
}
