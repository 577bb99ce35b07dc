package store

import (
	stdcmp "cmp"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

func newTestStore(clk *clocktesting.FakeClock, srcs ...string) *Store {
	if len(srcs) == 0 {
		srcs = []string{"kubelet"}
	}
	return New(Config{Clock: clk, Sources: srcs, FirstWindowMax: 30 * time.Second, StaleAfter: 40 * time.Second})
}

// storeAt is a newTestStore whose clock reads at(d).
func storeAt(d time.Duration, srcs ...string) (*clocktesting.FakeClock, *Store) {
	clk := clocktesting.NewFakeClock(at(d))
	return clk, newTestStore(clk, srcs...)
}

// podBatch is one node with one pod of one container, started 5 s before t0.
func podBatch(node string, ts time.Duration, cpu uint64) *sources.Batch {
	return &sources.Batch{Nodes: []sources.NodePoint{{Name: node, Point: pt(ts, -time.Hour, 100e9+cpu, 1<<30)}},
		Pods: []sources.PodPoint{{Namespace: "ns", Name: "p", UID: "u1", Node: node,
			Containers: []sources.ContainerPoint{{Name: "c", Point: pt(ts, -5*time.Second, cpu, 1<<20)}}}}}
}

func TestStorePodFirstScrape(t *testing.T) {
	clk, s := storeAt(10 * time.Second)
	s.Store("kubelet", []string{"n1"}, podBatch("n1", 5*time.Second, 5e9), clk.Now()) // 5 core-s over 10 s

	got, _ := readPod(t, s, "first scrape")
	want := PodUsage{Timestamp: at(5 * time.Second), Window: 10 * time.Second, Containers: []ContainerUsage{
		{Name: "c", Usage: Usage{Timestamp: at(5 * time.Second), Window: 10 * time.Second, CPUNanoCores: 500_000_000, MemoryBytes: 1 << 20}},
	}, FreshUntil: at(50 * time.Second)} // scraped at 10 s, stale after 40 s
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(PodUsage{}, "Sample")); diff != "" {
		t.Errorf("Pod (-want +got):\n%s", diff)
	}
	// The same samples read again are the same sample.
	if again, _, _ := s.Pod("ns", "p", "u1", "n1", PodRef{}); got.Sample == 0 || again.Sample != got.Sample {
		t.Errorf("Sample = %d, then %d; want the same, not zero", got.Sample, again.Sample)
	}
	// The node started an hour ago: one sample is not enough.
	if _, why := s.Node("n1"); why == nil || !strings.Contains(why.Reason, "needs a second") {
		t.Errorf("Node after one scrape: %v, want a second-sample reason", why)
	}

	clk.Step(15 * time.Second)
	s.Store("kubelet", []string{"n1"}, podBatch("n1", 20*time.Second, 8e9), clk.Now()) // node +3 core-s over 15 s
	if u, why := s.Node("n1"); why != nil || u.CPUNanoCores != 200_000_000 || u.Window != 15*time.Second {
		t.Errorf("Node usage = %+v, %v; want 0.2 cores over 15s", u, why)
	}
	// A new scrape is a new sample.
	if next, _, why := s.Pod("ns", "p", "u1", "n1", PodRef{}); why != nil || next.Sample == got.Sample {
		t.Errorf("after a new scrape: Sample %d (%v), want other than %d", next.Sample, why, got.Sample)
	}
}

// TestGenerationAndFreshUntil checks what a reader that keeps an answer
// relies on: every write moves the generation, and a pod's usage is served
// up to its FreshUntil and not a moment after.
func TestGenerationAndFreshUntil(t *testing.T) {
	clk, s := storeAt(10*time.Second, "kubelet", "ukpd")
	gen := s.Generation()
	moved := func(what string) {
		t.Helper()
		if g := s.Generation(); g == gen {
			t.Errorf("%s: generation stayed %d", what, g)
		} else {
			gen = g
		}
	}
	s.Store("kubelet", []string{"n1"}, podBatch("n1", 5*time.Second, 5e9), clk.Now())
	moved("Store")
	s.Failed("kubelet", []string{"n1"}, errors.New("refused"), clk.Now())
	moved("Failed")
	clk.Step(5 * time.Second)
	s.Store("kubelet", []string{"n1"}, podBatch("n1", 10*time.Second, 6e9), clk.Now())
	moved("Store after Failed")
	s.Store("ukpd", []string{"n2"}, podBatch("n2", 10*time.Second, 6e9), clk.Now())
	moved("Store of another source and node")
	s.Prune("ukpd", map[string]struct{}{})
	moved("Prune")
	s.Prune("kubelet", map[string]struct{}{"n1": {}})
	if g := s.Generation(); g != gen {
		t.Errorf("Prune that keeps every node: generation %d, want %d", g, gen)
	}
	u, ref := readPod(t, s, "a read")
	if g := s.Generation(); g != gen {
		t.Errorf("a read: generation %d, want %d", g, gen)
	}
	if want := clk.Now().Add(40 * time.Second); !u.FreshUntil.Equal(want) {
		t.Fatalf("FreshUntil = %v, want %v (scraped now, stale after 40 s)", u.FreshUntil, want)
	}
	clk.SetTime(u.FreshUntil)
	if again, _, why := s.Pod("ns", "p", "u1", "n1", ref); why != nil || again.Sample != u.Sample {
		t.Errorf("at FreshUntil: %v, sample %d; want the same usage", why, again.Sample)
	}
	clk.Step(time.Nanosecond)
	if _, _, why := s.Pod("ns", "p", "u1", "n1", ref); why == nil {
		t.Error("after FreshUntil: usage, want none (stale)")
	}
}

func TestStoreUnavailable(t *testing.T) {
	type step = func(s *Store, clk *clocktesting.FakeClock)
	n1 := []string{"n1"}
	scrape := func(s *Store, clk *clocktesting.FakeClock) {
		s.Store("kubelet", n1, podBatch("n1", 5*time.Second, 5e9), clk.Now())
	}
	fail := func(s *Store, clk *clocktesting.FakeClock) {
		s.Failed("kubelet", n1, errors.New("connection refused"), clk.Now())
	}
	wait := func(d time.Duration) step { return func(_ *Store, clk *clocktesting.FakeClock) { clk.Step(d) } }
	tests := []struct {
		name    string
		steps   []step
		uid     string
		wantErr string // empty: usage expected
	}{
		{name: "never scraped", wantErr: `node "n1" has not been scraped yet`},
		{name: "node down, no data", steps: []step{fail}, wantErr: `node "n1" is unreachable: connection refused`},
		{name: "node down after a good scrape: data served until stale", steps: []step{scrape, wait(15 * time.Second), fail}},
		{name: "node down for longer than the bound", steps: []step{scrape, wait(41 * time.Second), fail}, wantErr: "unreachable"},
		{name: "stale without a recorded failure", steps: []step{scrape, wait(41 * time.Second)}, wantErr: "stale"},
		{name: "pod not reported", steps: []step{func(s *Store, clk *clocktesting.FakeClock) {
			b := podBatch("n1", 5*time.Second, 5e9)
			b.Pods = nil
			s.Store("kubelet", n1, b, clk.Now())
		}}, wantErr: `did not report pod ns/p`},
		{name: "same name, other pod", steps: []step{scrape}, uid: "u2", wantErr: `did not report pod ns/p`},
		{name: "samples stop advancing", steps: []step{scrape, wait(15 * time.Second), scrape, wait(15 * time.Second), scrape, wait(15 * time.Second), scrape, wait(15 * time.Second)},
			wantErr: "stopped advancing"},
		{name: "pruned node", steps: []step{scrape, func(s *Store, _ *clocktesting.FakeClock) { s.Prune("kubelet", map[string]struct{}{"n2": {}}) }}, wantErr: "not been scraped"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk, s := storeAt(10 * time.Second)
			for _, step := range tc.steps {
				step(s, clk)
			}
			_, _, why := s.Pod("ns", "p", stdcmp.Or(tc.uid, "u1"), "n1", PodRef{})
			switch {
			case tc.wantErr == "" && why != nil:
				t.Fatalf("Pod: %v, want usage", why)
			case tc.wantErr != "" && (why == nil || !strings.Contains(why.Reason, tc.wantErr)):
				t.Fatalf("Pod: %v, want a reason containing %q", why, tc.wantErr)
			}
		})
	}
}

func TestStoreSourceOrder(t *testing.T) {
	clk, s := storeAt(10*time.Second, "ukpd", "kubelet")
	s.Store("kubelet", []string{"n1"}, podBatch("n1", 5*time.Second, 5e9), clk.Now())
	s.Store("ukpd", []string{"n1"}, podBatch("n1", 5*time.Second, 1e9), clk.Now())
	if got := podCPU(t, s, "both sources"); got != 100_000_000 {
		t.Errorf("CPU = %d nanocores, want the first source's 100000000", got)
	}
	// The first source lacking the pod falls through to the next.
	b := podBatch("n1", 5*time.Second, 1e9)
	b.Pods = nil
	s.Store("ukpd", []string{"n1"}, b, clk.Now())
	if got := podCPU(t, s, "the first source lacking the pod"); got != 500_000_000 {
		t.Errorf("CPU = %d nanocores, want the kubelet's 500000000", got)
	}
}

// TestPodRef: a read given where the last read found the pod answers as a
// read without it would, whatever the node's sources did since.
func TestPodRef(t *testing.T) {
	clk, s := storeAt(10*time.Second, "ukpd", "kubelet")
	s.Store("kubelet", []string{"n1"}, podBatch("n1", 5*time.Second, 5e9), clk.Now())
	var ref PodRef
	// read reads with the last read's ref, and wants wantCPU nanocores, or
	// no usage for 0.
	read := func(step string, wantCPU uint64) {
		t.Helper()
		want, _, wantWhy := s.Pod("ns", "p", "u1", "n1", PodRef{})
		got, next, why := s.Pod("ns", "p", "u1", "n1", ref)
		if diff := cmp.Diff(want, got); diff != "" || !cmp.Equal(why, wantWhy) {
			t.Errorf("%s: given the last read's ref, %v and (-without +with):\n%s; without it, %v", step, why, diff, wantWhy)
		}
		switch {
		case wantCPU == 0 && why == nil:
			t.Errorf("%s: usage, want none", step)
		case wantCPU != 0 && (len(got.Containers) != 1 || got.Containers[0].CPUNanoCores != wantCPU):
			t.Errorf("%s: %+v, want %d nanocores", step, got, wantCPU)
		}
		ref = next
	}

	read("first read", 500_000_000)
	first := ref
	if read("nothing changed", 500_000_000); ref != first {
		t.Error("the ref changed though no source wrote the node")
	}
	s.Store("ukpd", []string{"n1"}, podBatch("n1", 5*time.Second, 1e9), clk.Now())
	read("the first source reports the pod too", 100_000_000)
	s.Failed("ukpd", []string{"n1"}, errors.New("connection refused"), clk.Now())
	read("a failed scrape of the first source", 100_000_000)
	s.Prune("ukpd", map[string]struct{}{})
	read("the first source pruned", 500_000_000)
	s.Prune("kubelet", map[string]struct{}{})
	s.Store("kubelet", []string{"n1"}, podBatch("n1", 5*time.Second, 2e9), clk.Now())
	read("the node forgotten, then scraped again", 200_000_000)
	clk.Step(time.Minute)
	read("a minute later: stale", 0)
}

// readPod reads pod ns/p (UID u1) on n1, or fails with what.
func readPod(t *testing.T, s *Store, what string) (PodUsage, PodRef) {
	t.Helper()
	u, ref, why := s.Pod("ns", "p", "u1", "n1", PodRef{})
	if why != nil {
		t.Fatalf("%s: %v", what, why)
	}
	return u, ref
}

// podCPU is the CPU of readPod's first container.
func podCPU(t *testing.T, s *Store, what string) uint64 {
	t.Helper()
	u, _ := readPod(t, s, what)
	return u.Containers[0].CPUNanoCores
}

// TestPruneOneSource: pruning a source's node keeps what another source
// knows of it, and a node no source knows any more is forgotten.
func TestPruneOneSource(t *testing.T) {
	clk, s := storeAt(10*time.Second, "ukpd", "kubelet")
	for _, step := range []time.Duration{0, 5 * time.Second} {
		clk.Step(step)
		s.Store("kubelet", []string{"n1"}, podBatch("n1", 5*time.Second+step, 5e9+uint64(step)), clk.Now())
		s.Store("ukpd", []string{"n1"}, podBatch("n1", 5*time.Second+step, 1e9+2*uint64(step)), clk.Now())
	}
	if got := podCPU(t, s, "before pruning"); got != 2e9 {
		t.Fatalf("before pruning: %d nanocores, want ukpd's 2000000000", got)
	}
	s.Prune("ukpd", map[string]struct{}{})
	if got := podCPU(t, s, "after pruning ukpd"); got != 1e9 {
		t.Errorf("CPU = %d nanocores, want the kubelet's 1000000000", got)
	}
	s.Prune("kubelet", map[string]struct{}{})
	if _, ok := s.nodes.Load("n1"); ok {
		t.Error("a node no source knows is still held")
	}
	if _, _, why := s.Pod("ns", "p", "u1", "n1", PodRef{}); why == nil || !strings.Contains(why.Reason, "not been scraped") {
		t.Errorf("after pruning both: %v; want not scraped yet", why)
	}
}

// wantFresh fails unless s has fresh data and fresh usage as wanted.
func wantFresh(t *testing.T, what string, s *Store, data, usage bool) {
	t.Helper()
	if s.HasFreshData() != data || s.HasFreshUsage() != usage {
		t.Fatalf("%s: fresh data %v, usage %v; want %v, %v", what, s.HasFreshData(), s.HasFreshUsage(), data, usage)
	}
}

func TestStoreHasFreshData(t *testing.T) {
	clk, s := storeAt(0)
	wantFresh(t, "empty store", s, false, false)
	s.Failed("kubelet", []string{"n1"}, errors.New("down"), clk.Now())
	wantFresh(t, "only failures", s, false, false)
	s.Store("kubelet", []string{"n2"}, &sources.Batch{}, clk.Now())
	wantFresh(t, "scraped just now", s, true, false)
	clk.Step(41 * time.Second)
	wantFresh(t, "scraped 41s ago (bound 40s)", s, false, false)
}

func TestHasFreshUsage(t *testing.T) {
	clk, s := storeAt(0)
	wantFresh(t, "empty store", s, false, false)
	// Long-running node and container: one sample is no usage.
	old := podBatch("n1", 0, 5e9)
	old.Nodes[0].CPUCoreNanos, old.Pods[0].Containers[0].Point = 100e9, pt(0, -time.Hour, 5e9, 1<<20)
	s.Store("kubelet", []string{"n1"}, old, clk.Now())
	wantFresh(t, "after one sample", s, true, false)
	clk.Step(10 * time.Second)
	old.Nodes[0].Point = pt(10*time.Second, -time.Hour, 110e9, 1<<30)
	s.Store("kubelet", []string{"n1"}, old, clk.Now())
	wantFresh(t, "after two samples", s, true, true)
	clk.Step(41 * time.Second)
	wantFresh(t, "usage stale with its samples", s, false, false)
	// A new container's first sample is usage at once.
	s2 := newTestStore(clk)
	fresh := &sources.Batch{Pods: []sources.PodPoint{{Namespace: "ns", Name: "q", Node: "n1",
		Containers: []sources.ContainerPoint{{Name: "c", Point: pt(51*time.Second, 45*time.Second, 3e9, 1<<20)}}}}}
	s2.Store("kubelet", []string{"n1"}, fresh, clk.Now())
	wantFresh(t, "a new container's first sample", s2, true, true)
}

// TestPodTimestampEarliest is finding 7: a pod's timestamp and window are
// its earliest container's, as metrics-server serves them; they were the
// latest timestamp and the longest window.
func TestPodTimestampEarliest(t *testing.T) {
	clk, s := storeAt(20 * time.Second)
	batch := &sources.Batch{Pods: []sources.PodPoint{{Namespace: "ns", Name: "p", Node: "n1", Containers: []sources.ContainerPoint{
		{Name: "late", Point: pt(12*time.Second, 0, 6e9, 1)},                // 12 s since start
		{Name: "early", Point: pt(8*time.Second, 0, 4e9, 1)},                // 8 s since start
		{Name: "long", Point: pt(10*time.Second, -10*time.Second, 10e9, 1)}, // 20 s since start
	}}}}
	s.Store("kubelet", []string{"n1"}, batch, clk.Now())
	got, _, why := s.Pod("ns", "p", "", "n1", PodRef{})
	if why != nil || !got.Timestamp.Equal(at(8*time.Second)) || got.Window != 8*time.Second {
		t.Errorf("Pod: %v at %v over %v, want the earliest container's %v over 8s", why, got.Timestamp, got.Window, at(8*time.Second))
	}
}
