package provider

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	metricsapi "k8s.io/metrics/pkg/apis/metrics"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/podcache"
	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
	"github.com/group-metrics-server/group-metrics-server/pkg/store"
)

// snapshotWorld is a provider over a real store and pod index, and the
// means to change each.
type snapshotWorld struct {
	t     *testing.T
	clk   *clocktesting.FakeClock
	store *store.Store
	pods  *podcache.PodIndex
	p     *Provider
	// scrapes counts each node's scrapes: its pods' CPU counters grow
	// with its square, so that each scrape gives a new rate, and by a
	// different step per pod.
	scrapes map[string]uint64
}

const snapshotStaleAfter = 40 * time.Second

func newSnapshotWorld(t *testing.T, pods ...*corev1.Pod) *snapshotWorld {
	clk := clocktesting.NewFakeClock(now)
	st := store.New(store.Config{Clock: clk, Sources: []string{"kubelet"}, FirstWindowMax: 30 * time.Second, StaleAfter: snapshotStaleAfter})
	w := &snapshotWorld{t: t, clk: clk, store: st, pods: podIndex(pods...), scrapes: map[string]uint64{}}
	w.p = New(Config{Pods: w.pods, Nodes: podcache.NewNodeIndex(), Usage: w.store, Clock: clk, Groups: true, Readiness: group.DefaultReadiness})
	return w
}

// scrape stores a scrape of each node now: every cached pod bound to it,
// each container with its CPU counter grown since the last.
func (w *snapshotWorld) scrape(nodes ...string) {
	for _, node := range nodes {
		w.scrapes[node]++
		batch := &sources.Batch{}
		for i, pod := range w.pods.List("", labels.Everything()) {
			if pod.NodeName() != node {
				continue
			}
			pp := sources.PodPoint{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UIDString(), Node: node}
			for _, c := range pod.Containers() {
				cpu := w.scrapes[node] * w.scrapes[node] * uint64(i+1) * 1e9
				pp.Containers = append(pp.Containers, sources.ContainerPoint{Name: c,
					Point: sources.Point{Timestamp: w.clk.Now(), StartTime: now.Add(-time.Hour), CPUCoreNanos: cpu, MemoryBytes: 1 << 20}})
			}
			batch.Pods = append(batch.Pods, pp)
		}
		w.store.Store("kubelet", []string{node}, batch, w.clk.Now())
	}
}

// check lists every namespace, and each of names, and compares each list
// with the pods' answers one by one, which no snapshot serves.
func (w *snapshotWorld) check(step string, names ...string) {
	w.t.Helper()
	for _, ns := range append([]string{""}, names...) {
		got, err := w.p.ListPodMetrics(context.Background(), ns, labels.Everything(), nil)
		if err != nil {
			w.t.Fatalf("%s: list %q: %v", step, ns, err)
		}
		var want []metricsapi.PodMetrics
		for _, pod := range w.pods.List(ns, labels.Everything()) {
			if m, err := w.p.GetPodMetrics(context.Background(), pod.Namespace, pod.Name); err == nil {
				want = append(want, *m)
			}
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
			w.t.Errorf("%s: list %q (-one by one +list):\n%s", step, ns, diff)
		}
	}
}

func (w *snapshotWorld) cpu(namespace, name string) int64 {
	w.t.Helper()
	m, err := w.p.GetPodMetrics(context.Background(), namespace, name)
	if err != nil {
		w.t.Fatalf("%s/%s: %v", namespace, name, err)
	}
	return cpuMilli(m.Containers[0].Usage)
}

func withContainer(p *corev1.Pod) *corev1.Pod {
	p.Spec.Containers = []corev1.Container{{Name: "c"}}
	return p
}

// TestListSnapshot checks that a list without selectors, served from the
// namespaces' snapshots, answers what the pods answer one by one through
// every change that can make them differ: a pod added, relabelled or
// deleted, a scrape, a failed scrape, usage turning stale with time, and a
// group whose leader reports for it.
func TestListSnapshot(t *testing.T) {
	// Snapshots are held weakly: no collection may drop one between the
	// lists that check it is kept.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	w := newSnapshotWorld(t,
		withContainer(testPod("a", "web-1", "n1", corev1.PodRunning, map[string]string{"app": "web"})),
		withContainer(testPod("a", "web-2", "n1", corev1.PodRunning, map[string]string{"app": "web"})),
		withContainer(testPod("a", "pending", "", corev1.PodPending, nil)),
		withContainer(testPod("b", "db", "n2", corev1.PodRunning, nil)),
		lwsPod("0", "group", map[string]string{"main": "1"}),
		lwsPod("1", "", map[string]string{"main": "1"}),
	)
	w.scrape("n1", "n2")
	w.check("one scrape, no usage yet", "a", "b", "ml")
	w.clk.Step(15 * time.Second)
	w.scrape("n1", "n2")
	w.check("two scrapes", "a", "b", "ml")

	// Listed again with nothing changed, a namespace is served from its
	// snapshot; the group's namespace never is.
	kept := w.p.snaps.get("a")
	if kept == nil || len(kept.items) != 2 {
		t.Fatalf("snapshot of a: %+v, want one of 2 items", kept)
	}
	w.check("nothing changed", "a")
	if again := w.p.snaps.get("a"); again != kept {
		t.Error("the snapshot of a was joined again though nothing changed")
	}
	if s := w.p.snaps.get("ml"); s != nil {
		t.Errorf("the namespace of a group whose leader reports for it has a snapshot: %+v", s)
	}

	relabelled := withContainer(testPod("a", "web-1", "n1", corev1.PodRunning, map[string]string{"app": "api"}))
	w.pods.Set(podcache.NewPod(relabelled))
	w.check("a pod relabelled", "a", "b")
	w.pods.Delete("a", "web-2")
	w.check("a pod deleted", "a", "b")
	w.pods.Set(podcache.NewPod(withContainer(testPod("b", "new", "n2", corev1.PodRunning, nil))))
	w.check("a pod added, not scraped yet", "a", "b")

	before := w.cpu("a", "web-1")
	w.clk.Step(15 * time.Second)
	w.scrape("n1")
	if after := w.cpu("a", "web-1"); after == before {
		t.Fatalf("web-1's CPU is %dm after a scrape as before it; the fixture must change it", after)
	}
	w.check("n1 scraped", "a", "b")
	w.store.Failed("kubelet", []string{"n2"}, errors.New("refused"), w.clk.Now())
	w.check("n2 failed", "a", "b")

	// n2 was last scraped 15 s ago: its pods are served until 40 s after
	// that, not a moment longer, while n1's stay.
	m, err := w.p.GetPodMetrics(context.Background(), "b", "db")
	must(t, err)
	staleAt := now.Add(15*time.Second + snapshotStaleAfter)
	w.clk.SetTime(staleAt)
	kept = w.p.snaps.get("b")
	w.check("at the last fresh instant of n2", "a", "b")
	if s := w.p.snaps.get("b"); s != kept || len(s.items) != 1 || s.items[0].name != "db" {
		t.Errorf("at the last fresh instant of n2, b's snapshot is %+v, want the one before, serving db (%v)", s, m.Name)
	}
	w.clk.Step(time.Nanosecond)
	w.check("n2 stale", "a", "b")
	if got, _ := w.p.ListPodMetrics(context.Background(), "b", labels.Everything(), nil); len(got) != 0 {
		t.Errorf("n2 stale: b lists %d pods, want none", len(got))
	}

	// Nothing but a list holds a snapshot: a collection drops it, and
	// its cleanup the entry, looked up again or not.
	kept = nil
	runtime.GC()
	if s := w.p.snaps.get("a"); s != nil {
		t.Errorf("after a collection, a's snapshot is still kept: %+v", s)
	}
	// The cleanups run on a goroutine of their own after a collection.
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		runtime.GC()
		w.p.snaps.mu.Lock()
		defer w.p.snaps.mu.Unlock()
		return len(w.p.snaps.byNamespace) == 0, nil
	}); err != nil {
		t.Errorf("after a collection, snapshot entries are left: %v", err)
	}
}

// TestListSnapshotConcurrent lists while pods and scrapes change, for the
// race detector: snapshots are shared between lists.
func TestListSnapshotConcurrent(t *testing.T) {
	var pods []*corev1.Pod
	for i := range 20 {
		pods = append(pods, withContainer(testPod(fmt.Sprintf("ns-%d", i%3), fmt.Sprintf("p-%d", i), "n1", corev1.PodRunning, nil)))
	}
	w := newSnapshotWorld(t, pods...)
	w.scrape("n1")
	w.clk.Step(15 * time.Second)
	w.scrape("n1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			if _, err := w.p.ListPodMetrics(context.Background(), "", labels.Everything(), nil); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 50 {
		w.pods.Set(podcache.NewPod(withContainer(testPod("ns-0", fmt.Sprintf("p-%d", i%20), "n1", corev1.PodRunning, map[string]string{"round": fmt.Sprint(i)}))))
		w.scrape("n1")
	}
	<-done
	w.check("after the changes", "ns-0", "ns-1", "ns-2")
}
